#!/usr/bin/env bash
# Quick start 2/2: set up (venv + install with test extras) and run the whole test suite,
# then the vLLM engine's tests in their own environment (scripts/test_vllm.sh).
#   bash scripts/test.sh [pytest args]
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh" "[dev]"
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$HOME/.cache/torch_extensions}"
python -m pytest -q "$@"
# The vLLM engine's tests need their own environment (scripts/test_vllm.sh); run with the whole suite.
if [ $# -eq 0 ]; then
  bash "$(dirname "${BASH_SOURCE[0]}")/test_vllm.sh"
fi
