"""The shared engine the roles are handed: policies, rollouts, GRPO updates, RL maths and kernels, ranks.

Nothing here knows about challengers, solvers or the curriculum; it imports only
``curriculum.config`` (typed settings) and ``curriculum.errors``.
"""
