"""The README and docs/ are the manual: they match the code, and their links lead somewhere."""
import re
from pathlib import Path

from curriculum import metrics
from curriculum.config import valid_keys
from curriculum.config.docs import COMMAND, PAGE, page

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
PAGES = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").rglob("*.md"))]


def quick_start() -> list[str]:
    block = README.split("## Quick start", 1)[1].split("```", 2)[1]
    return [ln for ln in block.splitlines()[1:] if ln.strip() and not ln.startswith("#")]


def test_quick_start_is_two_commands_that_exist():
    commands = quick_start()
    assert commands == ["bash scripts/demo.sh", "bash scripts/test.sh"]
    for c in commands:
        assert (ROOT / c.split()[1]).is_file()


def test_ci_runs_the_readme_test_command():
    assert quick_start()[1] in (ROOT / ".ci" / "run").read_text().splitlines()


def test_readme_is_at_most_300_lines():
    # The front door: the rest lives in docs/, linked from the README's Reference list.
    n = len(README.splitlines())
    assert n <= 300, f"README.md has {n} lines; move detail to a page in docs/"


def test_configuration_page_is_generated_from_the_schema():
    assert PAGE.read_text() == page(), f"docs/configuration.md is out of date: run `{COMMAND}`"


def test_every_config_key_documented():
    documented = set(re.findall(r"^\| `([a-z_.]+)` \|", PAGE.read_text(), flags=re.M))
    assert documented == set(valid_keys()), f"docs/configuration.md is out of date: run `{COMMAND}`"


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
    assert constants
    # a role's stat (``of_role``) is documented as `challenger/x`, `solver/x`; HEALTH as `health/<alarm>`
    missing = {c for c in constants if f"`{c}" not in text and ("/" in c or f"/{c}`" not in text)}
    assert not missing, f"add them to docs/metrics.md: {sorted(missing)}"


def _prose(text: str) -> str:
    """The text outside fenced code blocks (code may hold brackets that are no links)."""
    return "".join(text.split("```")[::2])


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes, repeats numbered."""
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#+ (.+)$", _prose(path.read_text()), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        if seen[slug]:
            seen[f"{slug}-{seen[slug]}"] = 0
    return set(seen)


def test_local_links_lead_somewhere():
    # Only markdown links [text](path) are checked: paths in inline code (the README's code map,
    # which names modules a refactor is landing) are prose, not promises.
    broken = []
    for doc in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", _prose(doc.read_text())):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            if not dest.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, broken


def test_extending_repeats_the_readme_example_exactly():
    # tests/test_cli.py trains the README's copy; docs/extending.md must show the same code.
    def python_blocks(text):
        return [b.split("\n", 1)[1] for b in text.split("```")[1::2] if b.startswith("python")]

    readme = python_blocks(README.split("## Plugging in your own", 1)[1])[:2]
    extending = python_blocks((ROOT / "docs" / "extending.md").read_text())
    assert readme and all(block in extending for block in readme)
