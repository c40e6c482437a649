"""The README is the manual: its config table and quick start match the code."""
import re
from pathlib import Path

from curriculum.config import valid_keys

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_every_config_key_documented():
    table = README.split("<!-- config-table:start -->", 1)[1].split("<!-- config-table:end -->", 1)[0]
    documented = set(re.findall(r"^\| `([a-z_.]+)` \|", table, flags=re.M))
    assert documented == set(valid_keys()), "README table out of date: run scripts/config_table.py --write README.md"


def test_quick_start_is_two_commands_that_exist():
    block = README.split("## Quick start", 1)[1].split("```", 2)[1]
    commands = [ln for ln in block.splitlines()[1:] if ln.strip() and not ln.startswith("#")]
    assert commands == ["bash scripts/demo.sh", "bash scripts/test.sh"]
    for c in commands:
        assert (ROOT / c.split()[1]).is_file()


def test_ci_runs_the_readme_test_command():
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()


def test_metric_names_in_readme_exist_in_code():
    code = "\n".join(p.read_text() for pkg in ("curriculum", "challenger", "solver") for p in (ROOT / pkg).rglob("*.py"))
    for name in re.findall(r"^\| `((?:challenger|solver|curriculum|eval|time|sandbox)/[a-z_/{}0-9]+)` \|", README, flags=re.M):
        stem = name.split("/")[-1].split("{")[0].rstrip("_")
        assert stem in code, name
