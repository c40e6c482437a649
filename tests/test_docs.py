"""The reference pages in docs/ match the code: the config page is generated, metric names exist."""
import re
from pathlib import Path

from curriculum import metrics
from curriculum.config import valid_keys
from curriculum.config.docs import COMMAND, PAGE, page

ROOT = Path(__file__).resolve().parents[1]


def test_configuration_page_is_generated_from_the_schema():
    assert PAGE.read_text() == page(), f"docs/configuration.md is out of date: run `{COMMAND}`"


def test_every_config_key_documented():
    documented = set(re.findall(r"^\| `([a-z_.]+)` \|", PAGE.read_text(), flags=re.M))
    assert documented == set(valid_keys()), f"run `{COMMAND}`"


def _metric_names(text: str) -> list[str]:
    """The backticked names in the first column of docs/metrics.md's tables."""
    first_cells = re.findall(r"^\| (.+?) \|", text, flags=re.M)
    return [n for cell in first_cells for n in re.findall(r"`([a-z_]+/[a-z_/{}0-9,]+)`", cell)]


def test_metric_names_in_docs_exist_in_code():
    code = "\n".join(p.read_text() for pkg in ("curriculum", "challenger", "solver") for p in (ROOT / pkg).rglob("*.py"))
    names = _metric_names((ROOT / "docs" / "metrics.md").read_text())
    assert len(names) > 50
    for name in names:
        stem = name.split("/")[-1].split("{")[0].rstrip("_")
        built = stem.removeprefix("challenger_").removeprefix("solver_")  # f"time/{role}_update_s"
        assert stem in code or f"_{built}" in code, name


def test_every_metric_constant_is_documented():
    text = (ROOT / "docs" / "metrics.md").read_text()
    constants = {v for k, v in vars(metrics).items() if k.isupper() and isinstance(v, str)}
    assert constants and not {c for c in constants if f"`{c}" not in text}
