"""Environments: task families chosen by name (``env.name``); the built-in ones register on import."""
from __future__ import annotations

from curriculum.envs import arithmetic, code_output, code_triplets, hinted, ladder, math  # noqa: F401  (register themselves)
from curriculum.envs.base import Environment, FailedProposal, HeldOut, InvalidProposal, Task, held_out_texts, task_types, typed
from curriculum.envs.registry import ENVIRONMENTS, benchmark, make_env, register_env

__all__ = ["ENVIRONMENTS", "Environment", "FailedProposal", "HeldOut", "InvalidProposal", "Task", "benchmark", "held_out_texts", "make_env", "register_env", "task_types", "typed"]
