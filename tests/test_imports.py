"""Dependencies run one way: curriculum -> challenger, solver; never back."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {"challenger": {"curriculum", "solver"}, "solver": {"curriculum", "challenger"}, "curriculum/rl": {"curriculum"}}


def imported_tops(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_import_direction(package):
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for name in imported_tops(path):
            top = name.split(".")[0]
            if top in FORBIDDEN[package] and not (package == "curriculum/rl" and name.startswith("curriculum.rl")):
                bad.append(f"{path.relative_to(ROOT)} imports {name}")
    assert bad == []
