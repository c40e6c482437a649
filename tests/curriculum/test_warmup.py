"""The warm-up's examples: no held-out (benchmark) task reaches either role, as proposal, reference or solved task."""
import random

import pytest

from challenger.role import Challenger
from curriculum.engine import tiny
from curriculum.envs import make_env


@pytest.mark.parametrize("name, held_per_level", [("code_triplets", 3000), ("arithmetic", 30)])
def test_no_warmup_example_of_either_role_is_held_out(name, held_per_level, monkeypatch):
    env = make_env(name, num_levels=2)
    rng = random.Random("held-out")  # a held-out set this large makes collisions certain without the filter
    held_out = {env.sample_task(level, rng).text for level in (1, 2) for _ in range(held_per_level)}
    written = {"proposal": [], "answer": []}  # every task the warm-up writes out, by the role it is written for
    for role, method in [("proposal", "format_proposal"), ("answer", "format_answer")]:
        def record(task, _role=role, _write=getattr(env, method)):
            written[_role].append(task.text)
            return _write(task)
        monkeypatch.setattr(env, method, record)

    pairs = tiny.warmup_examples(env, random.Random(0), 400, env.num_levels, held_out, challenger_fraction=0.5,
                                 references=2, challenger_prompt=Challenger(env).prompt)
    assert len(pairs) == 400 and len(written["proposal"]) > 400 and len(written["answer"]) > 50  # refs, too
    assert not [t for t in written["proposal"] if t in held_out]  # code_triplets abduction: the answer, too
    assert not [t for t in written["answer"] if t in held_out]
