"""The tool call format: finding calls, notebook cells, observations, prompts, warm-up demonstrations."""
import random

import pytest

from curriculum.engine import tiny
from curriculum.envs import make_env
from solver.role import Solver
from solver.sandbox import Sandbox
from solver.tools import CUT, PythonTool, Toolbox, notebook_cell, observation, shown, with_tool_prompt


def test_find_call_takes_the_first_complete_block():
    box = Toolbox({"python": object()})
    assert box.find_call("no call") is None
    assert box.find_call("<python>1+1") is None  # not closed: no call
    assert box.find_call("1</python>") is None
    text = "think <python>a=1\nprint(a)</python> then <python>2</python>"
    call = box.find_call(text)
    assert (call.tool, call.code) == ("python", "a=1\nprint(a)") and text[: call.end].endswith("</python>")
    assert box.find_call("<python></python>").code == ""
    with pytest.raises(ValueError):
        Toolbox({})


def test_notebook_cell_shows_a_last_bare_expression():
    with Sandbox(workers=1, timeout_s=2.0) as box:
        run = lambda code: box.run(notebook_cell(code)).stdout  # noqa: E731
        assert run("1234+5678") == "6912\n"
        assert run("x = 3\nx * 2") == "6\n"
        assert run("print(7)") == "7\n"  # print's None is not shown
        assert run("'a' + 'b'") == "'ab'\n"  # repr, as a notebook
        assert run("x = 1") == ""
        assert box.run(notebook_cell("def f(:")).status == "error"  # unparsable code goes as it is


def test_shown_and_observation():
    assert shown("ok", "6912\n", "") == "6912"
    assert shown("error", "partial\n", "Traceback ...\n  File x\nValueError: bad\n") == "partial\nValueError: bad"
    assert shown("error", "", "") == "error"
    assert shown("timeout", "", "") == "[timeout]"
    assert observation("6912", 8) == "<output>6912</output>"
    assert observation("x" * 10, 4) == f"<output>xxxx{CUT}</output>"


def test_with_tool_prompt():
    assert with_tool_prompt("1+1=", "") == "1+1="
    assert with_tool_prompt("1+1=", "py:") == "py:1+1="
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Q"}]
    assert with_tool_prompt(chat, "Tools. ")[0] == {"role": "system", "content": "Tools. Be brief."}
    assert chat[0]["content"] == "Be brief."  # the environment's messages are not changed
    assert with_tool_prompt(chat[1:], "Tools.\n\n") == [{"role": "system", "content": "Tools."}, chat[1]]


def test_the_warm_up_demonstration_shows_what_the_sandbox_prints():
    """The warm-up's observation is the one the loop would append for the environment's tool code."""
    env = make_env("arithmetic", num_levels=3, max_digits=4, operators="+-*")
    solver = Solver(env, "py:")
    assert Solver(env).demonstration(env.sample_task(1, random.Random(0))) is None  # no tools: no demo
    rng = random.Random(1)
    tasks = [env.sample_task(rng.randint(1, 3), rng) for _ in range(12)]
    with Sandbox(workers=2, timeout_s=2.0) as box:
        tools = Toolbox({"python": PythonTool(box)}, output_chars=32)
        for task in tasks:
            prompt, segments = solver.demonstration(task, output_chars=32)
            assert prompt == "py:" + env.solver_prompt(task)
            (call, trained_call), (obs, trained_obs), (answer, trained_answer) = segments
            assert (trained_call, trained_obs, trained_answer) == (True, False, True)
            found = tools.find_call(call)
            assert found is not None and found.end == len(call)
            assert tools.run([found])[0].observation == obs
            assert env.score(task, answer) == 1.0


def test_warm_up_trains_no_observation_token():
    tok = tiny.build_tokenizer()
    pairs = [("py:1+2=", [("<python>1+2</python>", True), ("<output>3</output>", False), ("3", True)]), ("1+2=", "3")]
    ids, attn, mask = tiny.encode_pairs(tok, pairs)
    row = tok.decode(ids[0][mask[0] == 1].tolist())
    assert row == "<python>1+2</python>3<eos>"
    assert tok.decode(ids[1][mask[1] == 1].tolist()) == "3<eos>"
    env = make_env("arithmetic", num_levels=3, max_digits=4)
    solver = Solver(env, "py:")
    rng = random.Random(0)
    examples = tiny.warmup_examples(env, rng, 200, 3, set(), challenger_fraction=0.0, tool_demo=solver.demonstration,
                                    tool_fraction=0.5)
    with_tools = [p for p, c in examples if p.startswith("py:")]
    assert 60 < len(with_tools) < 140 and all(not isinstance(c, str) for p, c in examples if p.startswith("py:"))
    # without a tool demo the examples are those of before (the same random stream)
    plain = tiny.warmup_examples(env, random.Random(0), 50, 3, set(), challenger_fraction=0.5)
    again = tiny.warmup_examples(env, random.Random(0), 50, 3, set(), challenger_fraction=0.5, tool_fraction=0.5)
    assert plain == again
