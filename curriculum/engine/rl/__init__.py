"""RL maths: advantages, policy loss, token log-probs (pure functions on tensors).

Each of ``compute_advantages`` and ``policy_loss`` takes ``backend="auto" | "torch" |
"triton"``; ``auto`` runs the Triton kernels on CUDA tensors when Triton is installed
and the torch twins elsewhere. See docs/kernels.md.
"""
from curriculum.engine.rl._backend import BACKENDS, triton_available
from curriculum.engine.rl.advantages import ESTIMATORS, compute_advantages, group_ids_for, register_estimator
from curriculum.engine.rl.logprobs import full_logits_logprobs, linear_logprobs, sequence_logprobs
from curriculum.engine.rl.loss import AGGREGATIONS, aggregate, policy_loss
from curriculum.engine.rl.packed import packed_logprobs

__all__ = [
    "AGGREGATIONS",
    "BACKENDS",
    "ESTIMATORS",
    "aggregate",
    "compute_advantages",
    "full_logits_logprobs",
    "group_ids_for",
    "linear_logprobs",
    "packed_logprobs",
    "policy_loss",
    "register_estimator",
    "sequence_logprobs",
    "triton_available",
]
