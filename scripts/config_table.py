"""The README's config-key table, generated from the dataclasses (the single source of truth).

    python scripts/config_table.py                    # print it
    python scripts/config_table.py --write README.md  # replace the table between its markers
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from curriculum.config import key_specs  # noqa: E402

START, END = "<!-- config-table:start -->", "<!-- config-table:end -->"


def table() -> str:
    rows = ["| key | default | meaning |", "|---|---|---|"]
    for key, spec in key_specs().items():
        value = spec.default
        shown = "`" + (repr(value) if isinstance(value, str) else str(value)) + "`"
        rows.append(f"| `{key}` | {shown} | {spec.doc} |")
    return "\n".join(rows)


def write(path: Path) -> None:
    text = path.read_text()
    block = f"{START}\n{table()}\n{END}"
    new, n = re.subn(re.escape(START) + ".*?" + re.escape(END), lambda _: block, text, flags=re.S)
    if n != 1:
        raise SystemExit(f"{path}: expected one {START} ... {END} block, found {n}")
    path.write_text(new)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        write(Path(sys.argv[2]))
    else:
        print(table())
