#!/usr/bin/env bash
# Quick start 2/2: set up (venv + install with test extras) and run the whole test suite.
#   bash scripts/test.sh [pytest args]
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh" "[dev]"
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$HOME/.cache/torch_extensions}"
python -m pytest -q "$@"
