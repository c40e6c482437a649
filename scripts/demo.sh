#!/usr/bin/env bash
# Quick start 1/2: set up (venv + install) and run the CPU self-play demo on the embedded tiny model.
#   bash scripts/demo.sh [key=value ...]      e.g. bash scripts/demo.sh train.rounds=4
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh" ""
selfplay train configs/demo_cpu.yaml "$@"
RUN_DIR=$(python -c "import sys; from curriculum.config import load_config; print(load_config('configs/demo_cpu.yaml', sys.argv[1:]).run.dir)" "$@")
echo
echo "Done. Metrics: $RUN_DIR/metrics.jsonl   proposals: $RUN_DIR/tasks/   checkpoints: $RUN_DIR/checkpoints/"
echo "Dashboard: $RUN_DIR/dashboard.html (or: selfplay dashboard $RUN_DIR --serve)"
python scripts/summarize_run.py "$RUN_DIR"
