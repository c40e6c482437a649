"""A role's GRPO step inside the loop: its samples packed with their rewards and groups, one update
(``engine.grpo``), the step counted, the engine told the weights changed."""
from __future__ import annotations

import time

from curriculum.engine.grpo import grpo_update
from curriculum.engine.policy import ROLES
from curriculum.engine.rl import group_ids_for
from curriculum.engine.rollout import pack
from curriculum.rollouts import derive_seed


class RoleUpdates:
    def __init__(self, cfg, roles: dict, dist, engine, pad_token_id: int):
        self.cfg, self.roles, self.dist, self.engine, self.pad = cfg, roles, dist, engine, pad_token_id
        self.steps = {r: 0 for r in ROLES}  # optimizer steps per role, checkpointed

    def __call__(self, name: str, completions: list, rewards: list[float], kinds: list[str], r: int,
                 step: int) -> dict[str, float]:
        """One GRPO step of role ``name``. Group ids: ``group_size`` consecutive samples, or with
        ``loss.task_relative`` the task types (Absolute Zero's per-(task type, role) baselines)."""
        rc, t0 = getattr(self.cfg, name), time.time()
        rollout = pack(completions, rewards, group_ids_for(kinds, rc.group_size, rc.loss.task_relative), self.pad)
        self.engine.release()  # a vLLM engine frees its memory while the role trains
        stats = grpo_update(self.roles[name], rollout, rc.loss, grad_clip=rc.optim.grad_clip,
                            norm_len=rc.sampling.max_new_tokens,  # Dr. GRPO's constant, whatever the prompt length
                            backend=self.cfg.rl.backend, seed=derive_seed(self.cfg.run.seed, r, name, "minibatch", step),
                            dist=self.dist, tis_cap=self.cfg.rollout.tis_cap, temperature=rc.sampling.temperature)
        steps = int(stats.pop("optimizer_steps"))
        self.steps[name] += steps
        if steps:
            self.roles[name].version += 1  # the engine pushes these weights before the role samples again
        out = {f"{name}/{k}": v for k, v in stats.items()}
        return out | {f"{name}/steps": self.steps[name], f"time/{name}_update_s": time.time() - t0}
