"""The house's import rules: dependencies run one way, and no module imports itself in a circle.

Every import counts, at module level or inside a function, and so does
``importlib.import_module("...")`` with a literal name.
"""
import ast
import concurrent.futures
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("challenger", "solver", "curriculum")

# package prefix -> project modules it must not import (prefixes). The roles stand alone;
# the engine knows nothing of the loop; environments know nothing of the engine or the loop.
FORBIDDEN = {
    "challenger": ("curriculum", "solver"),
    "solver": ("curriculum", "challenger"),
    "curriculum.engine": ("challenger", "solver", "curriculum.trainer", "curriculum.pool", "curriculum.envs",
                          "curriculum.rundir", "curriculum.checkpoint", "curriculum.monitor", "curriculum.dashboard",
                          "curriculum.evaluate", "curriculum.cli", "curriculum.sources", "curriculum.warmup",
                          "curriculum.config.validate"),
    "curriculum.engine.rl": ("curriculum.config", "curriculum.engine.policy", "curriculum.engine.grpo",
                             "curriculum.engine.rollout", "curriculum.engine.distributed", "curriculum.engine.tiny"),
    "curriculum.envs": ("curriculum.engine", "curriculum.trainer", "curriculum.config", "curriculum.pool",
                        "curriculum.rundir", "curriculum.evaluate", "curriculum.cli", "challenger"),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def resolve(name: str) -> str | None:
    """The project module ``name`` refers to (itself, or the nearest package above it), or None."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> set[str]:
    """Project modules imported anywhere in ``module`` (``from a import b`` counts a.b if it is a module)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            names |= {f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names}
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names.add(node.args[0].value)
    return {m for m in map(resolve, names) if m is not None and m != module}


GRAPH = {m: imports_of(m) for m in MODULES}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert cycles(GRAPH) == []


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_import_direction(package):
    bad = []
    for module, deps in GRAPH.items():
        if module != package and not module.startswith(package + "."):
            continue
        for dep in deps:
            if any(dep == f or dep.startswith(f + ".") for f in FORBIDDEN[package]) and not dep.startswith(package):
                bad.append(f"{module} imports {dep}")
    assert bad == []


def test_roles_are_found_by_name():
    """Each role's work lives in its own package."""
    assert "class Challenger" in (ROOT / "challenger" / "role.py").read_text()
    assert "class Solver" in (ROOT / "solver" / "role.py").read_text()
    assert "challenger.role" in GRAPH["curriculum.trainer"] and "solver.role" in GRAPH["curriculum.trainer"]


# module -> project modules (prefixes) that importing it must not load, through any chain of imports.
TRANSITIVE_FORBIDDEN = {
    "curriculum.engine": ("challenger", "solver", "curriculum.envs", "curriculum.trainer", "curriculum.pool",
                          "curriculum.config.validate"),
    "curriculum.config": ("challenger", "solver", "curriculum.envs", "curriculum.engine", "curriculum.pool",
                          "curriculum.config.validate"),
}
ENGINE = sorted(m for m in MODULES if m.startswith("curriculum.engine") and m != "curriculum.engine.vllm_engine")


def _loaded_by(module: str, by_path: bool = False) -> set[str]:
    """Project modules in sys.modules after importing ``module`` (or several, separated by spaces) alone, in a
    fresh interpreter; ``by_path`` runs its file alone, without the packages above it (their ``__init__`` would
    count otherwise)."""
    load = (f"import importlib.util as u; s = u.spec_from_file_location('m', {str(MODULES[module])!r}); "
            "m = sys.modules['m'] = u.module_from_spec(s); s.loader.exec_module(m)") if by_path else f"import {', '.join(module.split())}"
    code = f"import sys; {load}; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    return {m for m in out.split() if m.split(".")[0] in PACKAGES}


def _forbidden(module: str) -> list[str]:
    return [f for prefix, fs in TRANSITIVE_FORBIDDEN.items() if module == prefix or module.startswith(prefix + ".")
            for f in fs]


def _reached(loaded: set[str], rules: list[str]) -> list[str]:
    return sorted(m for m in loaded if any(m == f or m.startswith(f + ".") for f in rules))


# Every fresh interpreter the tests below ask for, started a few at a time on the first call (each
# spends seconds importing torch on one core). A package's modules are imported together, in one
# interpreter: what all of them load together bounds what each loads alone.
FRESH = [(" ".join(ENGINE), False)] + [(m, False) for m in ["curriculum.config", "solver.role", "curriculum.trainer",
                                                           "curriculum.config.paths"]] + [("curriculum.config.schema", True)]
_LOADED: dict[tuple[str, bool], set[str]] = {}


def loaded_by(modules: str, by_path: bool = False) -> set[str]:
    if not _LOADED:
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            _LOADED.update(zip(FRESH, pool.map(lambda args: _loaded_by(*args), FRESH)))
    if (modules, by_path) not in _LOADED:
        _LOADED[modules, by_path] = _loaded_by(modules, by_path)
    return _LOADED[modules, by_path]


@pytest.mark.parametrize("package", sorted(TRANSITIVE_FORBIDDEN))
def test_transitive_imports(package):
    """What a package reaches through other modules counts too (curriculum.engine.grpo once loaded solver.tools
    through the config). The whole package is imported at once; on a failure, module by module to name the culprit."""
    modules = ENGINE if package == "curriculum.engine" else [package]
    rules = _forbidden(package)
    if _reached(loaded_by(" ".join(modules)), rules):
        culprits = {m: _reached(_loaded_by(m), rules) for m in modules}
        assert {m: r for m, r in culprits.items() if r} == {}


def test_config_schema_reaches_nothing_of_the_project():
    assert loaded_by("curriculum.config.schema", by_path=True) == set()


def test_transitive_check_sees_an_indirect_import():
    assert "solver.tools" in loaded_by("solver.role")  # solver.role imports solver.tools
    assert {"curriculum.envs", "curriculum.pool", "challenger.role"} <= loaded_by("curriculum.trainer")
    assert "curriculum.config" in loaded_by("curriculum.config.paths", by_path=False)  # the package comes too
