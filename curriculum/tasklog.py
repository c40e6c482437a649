"""The round's task log: one record per proposal and per label check, written to
RUN_DIR/tasks/round_NNNN.jsonl at the round's end (and into every checkpoint, so a resumed round's
file is whole). The dashboard's task tables and `selfplay status` read these files."""
from __future__ import annotations

import json
from typing import Callable, Iterator

from challenger.role import Proposal
from curriculum.checkpoint import atomic_write
from curriculum.engine.tools import Trajectory
from curriculum.envs import Task

LABEL_CHECK = "_label_check"  # suffix of a label check's phase


class TaskLog:
    def __init__(self, records: list[dict] | None = None):
        self.records: list[dict] = records or []

    def __iter__(self) -> Iterator[dict]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def add_proposals(self, r: int, phase: str, proposals: list[Proposal], rewards, accepted, *,
                      decode: Callable[[list[int]], str], solver_prompt: Callable[[Task], str]) -> None:
        """One record per proposal: the challenger's prompt (``decode`` of its ids) and the solver's
        (``solver_prompt``) as the models read them, the proposal, what parsing made of it, its solve rate
        and label (reference or majority answer); with tools also its whole trajectory."""
        rendered: dict[str, str] = {}
        for i, p in enumerate(proposals):
            self.records.append({
                "round": r, "phase": phase, "text": p.completion.text, "finished": p.completion.finished,
                "task": p.task.to_dict() if p.valid else None,
                "rejected": None if p.valid else p.parsed.reason,
                "solve_rate": p.solve_rate, "label": p.label,
                "reward": None if rewards is None else rewards[i],
                "accepted": None if accepted is None else accepted[i],
                "prompt": decode(p.completion.prompt_ids),
                "solver_prompt": rendered.setdefault(p.task.text, solver_prompt(p.task)) if p.valid else None,
                **({"trajectory": p.completion.trajectory} if isinstance(p.completion, Trajectory) else {}),
            })

    def add_label_check(self, r: int, phase: str, task: Task, label: str | None, rate: float, correct: bool) -> None:
        self.records.append({"round": r, "phase": phase + LABEL_CHECK, "task": task.to_dict(), "label": label,
                             "solve_rate": rate, "label_correct": correct})

    def label_checks(self) -> list[dict]:
        return [rec for rec in self.records if rec["phase"].endswith(LABEL_CHECK)]

    def write(self, path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, "".join(json.dumps(rec) + "\n" for rec in self.records))

    def sample_rows(self, k: int) -> list[list]:
        """The first ``k`` fill proposals as table rows (``SAMPLE_COLUMNS``)."""
        return [[rec["round"], rec["phase"], rec["text"], rec["rejected"] or "", rec["solve_rate"], rec["accepted"]]
                for rec in self.records if rec["phase"] == "fill"][:k]


SAMPLE_COLUMNS = ["round", "phase", "proposal", "rejected", "solve_rate", "accepted"]
