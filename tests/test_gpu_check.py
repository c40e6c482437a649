"""The GPU check's math step, run as its CPU dry run (GPU_CHECK_SMOKE=1), so it is known to work before a GPU is lent."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_check_math_dry_run(tmp_path):
    env = {**os.environ, "GPU_CHECK_SMOKE": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "scripts/gpu_check_math.py", "--out", str(tmp_path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((tmp_path / "math.json").read_text())
    assert result["problems"] == [] and result["task_records"] > 0
    assert "curriculum/label_accuracy" in result["last_metrics"] or any(
        "curriculum/label_accuracy" in json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines())
