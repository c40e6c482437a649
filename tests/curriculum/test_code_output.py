"""The sandbox-grounded environment: answers come from running the program, twice."""
import random

import pytest

from challenger.proposals import parse_proposals
from curriculum.envs import make_env


@pytest.fixture(scope="module")
def env():
    return make_env("code_output", num_levels=4, timeout_s=1.0)


def test_reference_answer_is_the_programs_output(env):
    task = env.parse_proposal("x=3\nfor i in range(4):\n    x+=i\nprint(x)")
    assert task.answer == "9"
    assert env.score(task, " 9\n") == 1.0 and env.score(task, "10") == 0.0
    assert env.solver_prompt(task).endswith("#output:")


@pytest.mark.parametrize(
    "code,reason",
    [
        ("print(1", "syntax"),
        ("x = 1", "no_print"),
        ("import random\nprint(random.random())", "nondeterministic"),
        ("print(1)\nwhile True: pass", "exec_timeout"),
        ("print(1/0)", "exec_error"),
        ("print('a' * 100)", "answer_length"),
        ("import socket\ns = socket.create_connection(('1.1.1.1', 80), timeout=1)\nprint(1)", "exec_error"),
        ("print(open('/etc/shadow').read())", "exec_error"),
        ("x = ' ' * (2**34)\nprint(len(x))", "exec_memory"),
    ],
)
def test_bad_programs_are_rejected(env, code, reason):
    [parsed] = parse_proposals([code], env.parse_proposal)
    assert not parsed.valid and parsed.reason.startswith(reason), parsed.reason


def test_generator_levels_ground_and_roundtrip(env):
    rng = random.Random(0)
    for level in range(1, 5):
        task = env.sample_task(level, rng)
        assert abs(task.level - level) <= 1
        assert env.parse_proposal(env.format_proposal(task)) == task
        assert env.score(task, env.format_answer(task)) == 1.0


def test_sandbox_still_serves_after_attacks(env):
    import os

    # Signals to "the parent" reach only the sandbox's own PID namespace, never the trainer.
    parse_proposals(["import os, signal\nos.kill(os.getppid(), 9)\nos.kill(1, 9)\nprint(1)"], env.parse_proposal)
    parse_proposals(["import os\nwhile True: os.fork()"], env.parse_proposal)
    assert os.getpid() > 0  # still here
    assert env.parse_proposal("print(6*7)").answer == "42"


def test_held_out_exclusion_matches_a_respaced_or_commented_benchmark_program(env):
    from curriculum.envs import benchmark, held_out_texts

    tasks = benchmark(env, 0, 2)
    loop = next(t for t in tasks if "for" in t.text)
    held = held_out_texts(env, tasks)
    variant = "# warm up\n" + loop.text.replace("x=", "x = ").replace("\n", "  # step\n", 1) + "\n\n"
    assert variant != loop.text and variant.strip() not in {t.text for t in tasks}
    task = env.parse_proposal(variant)  # a valid proposal, so only the exclusion can stop it
    assert task.answer == loop.answer
    assert task.text in held
    assert "print(12345)" not in held and "print(12345" not in held  # other programs, parsed or not, pass
    assert loop.text in held_out_texts(make_env("arithmetic"), tasks)  # without canonical: exact text
