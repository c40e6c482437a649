"""Tools the solver may call while it answers: the call format, the sandbox behind it, the observations.

The format, in the solver's own text (``solver.tools: [python]``)::

    <python>12345+67890</python><output>80235</output>80235

- A **call** is the first ``<python>...</python>`` block of a turn; generation of the turn
  stops at its closing tag (``curriculum.engine.tools`` cuts what the model wrote after it).
- The code runs in the sandbox (``solver.sandbox``) like a notebook cell: what it prints,
  and the ``repr`` of a last bare expression unless it is None (``12345+67890`` shows
  ``80235``). A failure shows the last line of its traceback, a limit shows its status
  (``[timeout]``, ``[output_limit]``, ...).
- The **observation** ``<output>...</output>`` is appended to the trajectory (at most
  ``output_chars`` characters between the tags, longer ones cut with ``...[cut]``); the
  solver then writes its next turn.
- The **answer** is the text of the last turn, the one written after the last observation
  (with no tool call: the whole completion, as without tools). That is what the
  environment scores.

Text only: tokens, masks and the turn loop are the engine's (``curriculum.engine.tools``).
"""
from __future__ import annotations

import ast
import re
import time
from dataclasses import dataclass
from typing import Any

OUTPUT_OPEN, OUTPUT_CLOSE = "<output>", "</output>"
CUT = "...[cut]"

# The solver's prompt with tools, when solver.tool_prompt is not set otherwise.
DEFAULT_TOOL_PROMPT = ("You can run Python: write code between <python> and </python>; what it prints (and the value "
                       "of a last bare expression) comes back between <output> and </output>. Then answer.\n\n")


@dataclass(frozen=True)
class Call:
    """A complete tool call found in a turn's text: the tool, its code and where the closing tag ends."""

    tool: str
    code: str
    end: int


@dataclass(frozen=True)
class ToolResult:
    """What one call gave back: the observation text (tags included), the sandbox status, seconds."""

    observation: str
    status: str
    seconds: float


class PythonTool:
    """``<python>`` calls run in a sandbox (``solver.sandbox.Sandbox`` or anything with its ``run_many``)."""

    name = "python"

    def __init__(self, sandbox: Any, timeout_s: float = 2.0):
        self.sandbox = sandbox
        self.timeout_s = timeout_s

    def run(self, codes: list[str]) -> list[tuple[str, str]]:
        """(status, shown text) per snippet; the sandbox failing as a whole is a ``killed`` result each."""
        try:
            results = self.sandbox.run_many([notebook_cell(c) for c in codes], timeout_s=self.timeout_s)
        except Exception as exc:  # noqa: BLE001 - a broken sandbox costs the calls, never the run
            return [("killed", f"[sandbox failed: {type(exc).__name__}]") for _ in codes]
        return [(r.status, shown(r.status, r.stdout, r.stderr)) for r in results]


TOOLS = {"python": PythonTool}


def notebook_cell(code: str) -> str:
    """``code`` with its last statement, if a bare expression, printed as a notebook shows it (repr, not None).

    Code that does not parse is returned unchanged: the sandbox reports the SyntaxError.
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return code
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return code
    last = tree.body[-1]
    show = ast.parse("__value = None\nif __value is not None:\n    print(repr(__value))").body
    show[0].value = last.value
    tree.body[-1:] = show
    return ast.unparse(ast.fix_missing_locations(tree))


def shown(status: str, stdout: str, stderr: str) -> str:
    """What a run shows the solver: its output, then the traceback's last line (error) or ``[status]`` (a limit)."""
    text = stdout.rstrip()
    if status == "error":
        lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
        text = "\n".join(filter(None, [text, lines[-1] if lines else "error"]))
    elif status != "ok":
        text = "\n".join(filter(None, [text, f"[{status}]"]))
    return text


def observation(text: str, output_chars: int) -> str:
    """``<output>text</output>``, the text cut to ``output_chars`` characters (marked) if longer."""
    if len(text) > output_chars:
        text = text[:output_chars] + CUT
    return f"{OUTPUT_OPEN}{text}{OUTPUT_CLOSE}"


class Toolbox:
    """The tools of ``solver.tools``: finds calls in a turn's text and runs them, a batch at a time."""

    def __init__(self, tools: dict[str, Any], output_chars: int = 256):
        if not tools:
            raise ValueError("a Toolbox needs at least one tool")
        self.tools = tools
        self.output_chars = output_chars
        names = "|".join(re.escape(n) for n in tools)
        self._call = re.compile(rf"<({names})>(.*?)</\1>", re.S)

    def find_call(self, text: str) -> Call | None:
        """The first complete call in ``text`` (opening and closing tag), or None."""
        m = self._call.search(text)
        return None if m is None else Call(m.group(1), m.group(2), m.end())

    def run(self, calls: list[Call]) -> list[ToolResult]:
        """Observations of ``calls`` in order; each tool runs its calls as one batch. A call's seconds are
        its share of its batch's wall-clock time (the time the rollout waited)."""
        out: list[ToolResult | None] = [None] * len(calls)
        for name, tool in self.tools.items():
            idx = [i for i, c in enumerate(calls) if c.tool == name]
            if not idx:
                continue
            t0 = time.perf_counter()
            results = tool.run([calls[i].code for i in idx])
            share = (time.perf_counter() - t0) / len(idx)
            for i, (status, text) in zip(idx, results):
                out[i] = ToolResult(observation(text, self.output_chars), status, share)
        return out  # type: ignore[return-value]


def with_tool_prompt(prompt: str | list[dict], tool_prompt: str) -> str | list[dict]:
    """The solver's prompt with the tools announced: ``tool_prompt`` before a text prompt, or at the
    start of the system message of a chat prompt (a new system message if it has none)."""
    if not tool_prompt:
        return prompt
    if isinstance(prompt, str):
        return tool_prompt + prompt
    messages = [dict(m) for m in prompt]
    if messages and messages[0].get("role") == "system":
        messages[0]["content"] = tool_prompt + messages[0]["content"]
        return messages
    return [{"role": "system", "content": tool_prompt.rstrip()}] + messages


def demonstration(code: str, answer: str, output_chars: int = 256, tool: str = "python") -> list[tuple[str, bool]]:
    """One tool-using answer as (text, written by the model) segments, for a supervised warm-up:
    the call, the observation a program printing ``answer`` gets back (not the model's: no loss),
    and the answer copied from it."""
    return [(f"<{tool}>{code}</{tool}>", True), (observation(answer, output_chars), False), (answer, True)]
