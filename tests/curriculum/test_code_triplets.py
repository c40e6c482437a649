"""Absolute Zero's code triplets: grounding by the sandbox, each task type's scoring, hostile programs."""
import os
import random
import textwrap
from pathlib import Path

import pytest

from challenger.proposals import parse_proposals
from curriculum.envs import Task, make_env
from curriculum.envs.code_triplets import KINDS, Triplet
from curriculum.envs.programs import STEPS, TYPES, canonical, random_input, run_program
from solver.role import Solver

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def env():
    return make_env("code_triplets", num_levels=4, timeout_s=1.0)


@pytest.fixture(scope="module")
def open_env():
    """No import or name policy: every program reaches the sandbox."""
    return make_env("code_triplets", num_levels=4, timeout_s=1.0, restrict=False)


def task(env, kind, program, *inputs, message=""):
    text = program + "".join(f"\n#input: {i}" for i in inputs) + (f"\n#message: {message}" if message else "")
    return env.parse_proposal(text, kind=kind)


DOUBLE = "def f(x):\n    return x * 2 + 1"
MOD3 = "def f(x):\n    return x % 3"
INC = "def f(x):\n    return x + 1"


def test_deduction_is_graded_as_a_literal_without_running(env):
    t = task(env, "deduction", DOUBLE, 3)
    assert (t.kind, t.answer, t.level) == ("deduction", "7", 1)
    assert env.solver_prompt(t) == f"{DOUBLE}\n#input: 3\n#output:"
    lists = task(env, "deduction", "def f(x):\n    return sorted(x)", "[3,1,2]")
    ran = env.executions
    assert [env.score(t, a) for a in ("7", " 7\n", "8", "7.0", "6+1", "")] == [1, 1, 0, 0, 0, 0]
    assert lists.answer == "[1, 2, 3]" and env.score(lists, "[1,2,3]") == 1.0 and env.score(lists, "(1, 2, 3)") == 0.0
    assert env.executions == ran  # an answer is compared, never run


def test_abduction_scores_any_input_with_the_same_output(env):
    t = task(env, "abduction", MOD3, 4)
    assert (t.answer, env.solver_prompt(t)) == ("4", f"{MOD3}\n#output: 1\n#input:")
    # the program decides, not the reference input
    assert env.score(t, "4") == env.score(t, "7") == env.score(t, " -2 ") == 1.0
    assert env.score(t, "3") == 0.0
    assert env.score(t, "'a'") == 0.0  # f raises on it
    two = task(env, "abduction", "def f(a, b):\n    return a * b", "2, 6")
    assert env.score(two, "3,4") == env.score(two, "(12), 1") == 1.0 and env.score(two, "12") == 0.0  # f needs two


def test_abduction_inputs_are_literals_never_code(env):
    t = task(env, "abduction", MOD3, 4)
    ran = env.executions
    for attack in ["__import__('os').kill(__import__('os').getppid(), 9)", "open('/etc/passwd').read()",
                   "4) or print(1", "x", "*[4]", "b=4", "9**9**9", "{'a', 'b'}", "1" * 200]:
        assert env.score(t, attack) == 0.0, attack
    assert env.executions == ran  # refused before the sandbox


def test_induction_shows_half_the_pairs_and_scores_the_held_back_ones(env):
    t = task(env, "induction", INC, 1, 2, 3, 4, message="add one")
    assert t.answer == INC and t.kind == "induction"
    prompt = env.solver_prompt(t)
    assert prompt == "#message: add one\n#input: 1\n#output: 2\n#input: 2\n#output: 3\n#program:\n"
    assert "return" not in prompt and "4" not in prompt and "5" not in prompt  # program and held-back pairs hidden
    assert env.score(t, INC) == 1.0
    assert env.score(t, "def f(y):\n    return 1 + y\n") == 1.0  # any program that computes it
    assert env.score(t, "def f(x):\n    return 4") == 0.5  # right on input 3 only
    assert env.score(t, "def f(x):\n    if x == 4:\n        raise ValueError\n    return x + 1") == 0.5
    assert env.score(t, "def f(x):\n    return x + 2") == 0.0
    assert env.score(t, "def g(x):\n    return x + 1") == 0.0  # no f
    assert env.score(t, "def f(x) return x") == 0.0


HOSTILE = {
    "loops forever": "def f(x):\n    while True:\n        pass",
    "prints megabytes": "def f(x):\n    print('x' * 10 ** 7)\n    return x + 1",
    "raises": "def f(x):\n    raise SystemExit(0)",
    "kills the parent": "import os\ndef f(x):\n    os.kill(os.getppid(), 9)\n    os.kill(1, 9)",
    "kills the parent at import": "import os\nos.kill(os.getppid(), 9)\ndef f(x):\n    return x + 1",
    "kills the parent, hidden": "def f(x):\n    m = __import__('os')\n    m.kill(m.getppid(), 9)",
    "fork bomb": "import os\ndef f(x):\n    while True:\n        os.fork()",
    "exits early": "import os\ndef f(x):\n    os._exit(0)",
    "eats memory": "def f(x):\n    return len(' ' * 2 ** 34) + x",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
@pytest.mark.parametrize("policy", ["restricted", "sandbox only"])
def test_hostile_induction_programs_score_zero_and_the_trainer_goes_on(env, open_env, name, policy):
    box = env if policy == "restricted" else open_env
    t = task(box, "induction", INC, 1, 2, 3, 4)
    assert box.score(t, HOSTILE[name]) == 0.0
    assert box.score(t, INC) == 1.0  # the sandbox still answers, the trainer is still here
    assert os.getpid() > 0


def test_the_policy_refuses_attacks_before_running_them(env):
    t = task(env, "induction", INC, 1, 2, 3, 4)
    ran = env.executions
    for name in ("kills the parent", "kills the parent at import", "kills the parent, hidden", "fork bomb"):
        assert env.score(t, HOSTILE[name]) == 0.0
    assert env.score(t, "def f(x):\n    return x.__class__.__base__.__subclasses__()") == 0.0
    assert env.executions == ran
    assert env.score(t, "import math\ndef f(x):\n    return math.floor(x) + 1") == 1.0  # allowed modules run


def test_programs_that_write_outside_score_zero_and_write_nothing(env, open_env, tmp_path):
    for box in (env, open_env):
        t = task(box, "induction", INC, 1, 2, 3, 4)
        for target in (tmp_path / "pwned", ROOT / "pwned"):
            program = f"def f(x):\n    open({str(target)!r}, 'w').write('x')\n    return x + 1"
            assert box.score(t, program) == 0.0
            assert not target.exists()


def test_a_timeout_is_counted_and_the_solver_role_scores_through_it(env):
    t = task(env, "induction", INC, 1, 2, 3, 4)

    class Completion:
        def __init__(self, text):
            self.text, self.finished = text, True

    Solver(env).attempt([t], lambda prompts: [Completion(INC)])  # cached here, whichever tests ran before
    before = env.stats()
    completions = [HOSTILE["loops forever"] + "  # fresh", INC, "garbage(", HOSTILE["kills the parent"] + "\n"]
    attempts = Solver(env).attempt([t] * 4, lambda prompts: [Completion(c) for c in completions])
    assert [a.score for a in attempts] == [0.0, 1.0, 0.0, 0.0]
    after = env.stats()
    assert after["sandbox/timeouts"] == before["sandbox/timeouts"] + 1
    assert after["sandbox/executions"] == before["sandbox/executions"] + 1  # the rest: cached, refused, garbage


@pytest.mark.parametrize(
    "kind,text,reason",
    [
        ("deduction", DOUBLE, "no_input"),
        ("deduction", "def f(x):\n    return x +\n#input: 1", "syntax"),
        ("deduction", "print(1)\ndef f(x):\n    return x\n#input: 1", "top_level_code"),
        ("deduction", "def g(x):\n    return x\n#input: 1", "no_f"),
        ("deduction", f"{DOUBLE}\n#input: 1\n#input: 2", "inputs:2 not in [1, 1]"),
        ("deduction", f"{DOUBLE}\n#input: 1\nx = 2", "format"),
        ("deduction", f"{DOUBLE}\n#input: y", "input_not_literal"),
        ("deduction", f"{DOUBLE}\n#input: x=1", "input_form"),
        ("deduction", "def f(x):\n    while True:\n        pass\n#input: 1", "exec_timeout"),
        ("deduction", "def f(x):\n    return 1 / x\n#input: 0", "exec_error"),
        ("deduction", "def f(x):\n    print(x)\n    return x\n#input: 1", "prints"),
        ("deduction", "def f(x):\n    return hash('abc') + x\n#input: 1", "nondeterministic"),  # per-worker hash seed
        ("deduction", "import random\ndef f(x):\n    return random.random()\n#input: 1", "forbidden:random"),
        ("deduction", "def f(x):\n    return float('nan')\n#input: 1", "output_not_literal"),
        ("deduction", "def f(x):\n    return 'a' * 100\n#input: 1", "answer_length"),
        ("deduction", "def f(x):\n    print('x' * 10 ** 7)\n#input: 1", "exec_output_limit"),
        ("deduction", "import os\ndef f(x):\n    os.kill(os.getppid(), 9)\n    return 1\n#input: 1", "forbidden:os"),
        ("deduction", "def f(x):\n    return open('/etc/shadow').read()\n#input: 1", "forbidden:open"),
        ("deduction", 'def f(x):\n    """doc\n#b"""\n    return x\n#input: 1', "markers"),
        ("abduction", f"{DOUBLE}\n#input: {{'a', 'b'}}", "input_set"),
        ("induction", f"{INC}\n#input: 1", "inputs:1 not in [2, 4]"),
        ("induction", f"{INC}\n#input: 1\n#input: 1", "repeated_input"),
        ("induction", "def f(x):\n    return 0\n#input: 1\n#input: 2", "constant_outputs"),
        ("induction", f"{INC}\n#input: 1\n#input: 2\n#message: {'m' * 65}", "message_length"),
        ("induction", f"{INC}\n#input: 1\n#message: a\n#input: 2", "format"),
    ],
)
def test_bad_proposals_are_rejected_with_the_reason(env, kind, text, reason):
    [parsed] = parse_proposals([text], lambda s: env.parse_proposal(s, kind=kind))
    assert not parsed.valid and parsed.reason.startswith(reason), parsed.reason


@pytest.mark.parametrize(
    "text,reason",
    [
        ("import random\ndef f(x):\n    return random.random()\n#input: 1", "nondeterministic"),
        ("def f(x):\n    return open('/etc/shadow').read()\n#input: 1", "exec_error"),
        ("import os\ndef f(x):\n    return os.listdir('/work')\n#input: 1", "exec_error"),
        ("def f(x):\n    return object()\n#input: 1", "nondeterministic"),
    ],
)
def test_without_the_policy_the_sandbox_rejects_them(open_env, text, reason):
    [parsed] = parse_proposals([text], lambda s: open_env.parse_proposal(s, kind="deduction"))
    assert not parsed.valid and parsed.reason.startswith(reason), parsed.reason


def test_without_the_policy_signals_to_the_parent_reach_only_the_sandbox(open_env):
    t = open_env.parse_proposal("import os\ndef f(x):\n    os.kill(os.getppid(), 9)\n    os.kill(1, 9)\n#input: 1")
    assert t.answer == "None"  # f ran to its end: the signals went nowhere that matters
    assert os.getpid() > 0 and open_env.parse_proposal(f"{INC}\n#input: 41").answer == "42"


def test_proposal_canonical_form_roundtrip_and_types(env):
    t = task(env, "abduction", "def f( x ):\n    # a comment\n    return x*2", "  [1,2] ")
    assert t.text == "#abduction\ndef f(x):\n    return x * 2\n#input: [1, 2]\n#output: [1, 2, 1, 2]"
    assert env.format_proposal(t) == "def f(x):\n    return x * 2\n#input: [1, 2]"
    assert Triplet.from_text(t.text).outputs == ("[1, 2, 1, 2]",)
    assert Task.from_dict(t.to_dict()) == t
    assert Task.from_dict({"text": "3+4", "answer": "7", "level": 1}).kind == ""  # a pool saved before types
    assert env.challenger_prompt(kind="induction") == "#induction\n" and env.challenger_prompt() == "#deduction\n"
    with pytest.raises(ValueError, match="not one of"):
        make_env("code_triplets", task_types=["abduction"]).challenger_prompt(kind="deduction")
    for bad in (["deduction", "deduction"], ["translation"], [], "deduction"):
        with pytest.raises(ValueError, match="task_types"):
            make_env("code_triplets", task_types=bad)


def test_generator_composes_every_step_and_all_its_programs_run_in_the_sandbox(env):
    rng = random.Random(0)
    texts = set()
    for level in range(1, 5):
        for kind in KINDS:
            for _ in range(12):
                t = env.sample_task(level, rng, kind=kind)
                assert (t.level, t.kind) == (level, kind)
                # The sandbox's outputs are the generator's: parsing the proposal grounds it again.
                assert env.parse_proposal(env.format_proposal(t), kind=kind) == t
                assert env.score(t, env.format_answer(t)) == 1.0
                texts.add(t.text)
    assert len(texts) == 4 * 3 * 12  # no repeats: constants and steps vary
    assert {s.takes for s in STEPS} == {s.gives for s in STEPS} == set(TYPES)


def test_every_step_at_its_extreme_constants_runs_the_same_in_the_sandbox():
    wide = make_env("code_triplets", num_levels=1, max_answer_chars=128, timeout_s=2.0)
    rng = random.Random(2)
    for step in STEPS:
        for a, b in ((step.a[0], step.b[0]), (step.a[1], step.b[1])):
            body = textwrap.indent(step.src.format(a=a, b=b, c="a", d="b"), "    ")
            source = canonical(f"def f(x):\n{body}\n    return x")
            for arg in [random_input(step.takes, rng) for _ in range(3)]:
                t = wide.parse_proposal(f"{source}\n#input: {arg}", kind="deduction")
                assert t.answer == run_program(source, [arg])[0], (source, arg)


def test_generator_levels_and_random_type(env):
    rng = random.Random(1)
    kinds = {env.sample_task(2, rng).kind for _ in range(30)}
    assert kinds == set(KINDS)
    only = make_env("code_triplets", task_types=["induction"], num_levels=2)
    t = only.sample_task(2, rng)
    assert t.kind == "induction" and len(Triplet.from_text(t.text).inputs) == 4 and t.level == 2
    with pytest.raises(ValueError, match="max_chars"):
        make_env("code_triplets", num_levels=12, max_chars=40)
