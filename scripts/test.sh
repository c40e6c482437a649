#!/usr/bin/env bash
# Quick start 2/2: set up (venv + install with test extras, and the system tools some tests need:
# bubblewrap for the sandbox's outer isolation, Chromium for the dashboard's screenshots) and run the
# whole test suite, then the vLLM engine's tests in their own environment (scripts/test_vllm.sh).
#   bash scripts/test.sh [pytest args]
# A tool that cannot be installed here (not root with apt) is named in one line, and only the tests
# that need it are skipped.
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/setup_env.sh" "[dev]"
# The whole suite also needs the vLLM environment (minutes of downloads on a fresh machine): it is
# built in the background while the main suite runs.
VLLM_INSTALL="" VLLM_LOG="${TMPDIR:-/tmp}/selfplay-vllm-install.$$.log"
if [ $# -eq 0 ]; then
  echo "[test] checking the vLLM environment in the background (log: $VLLM_LOG)"
  bash "$HERE/test_vllm.sh" --install-only > "$VLLM_LOG" 2>&1 &
  VLLM_INSTALL=$!
fi
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$HOME/.cache/torch_extensions}"

# need COMMAND PACKAGE WHAT: install PACKAGE if COMMAND is missing (root with apt only), else say what is skipped.
SELFPLAY_TESTS_WITHOUT=""
need() {
  command -v "$1" >/dev/null 2>&1 && return 0
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "[test] installing $2 ($3)"
    apt-get install -y -qq --no-install-recommends "$2" >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends "$2" >/dev/null 2>&1; } \
      || true
  fi
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "[test] $2 is missing, so the tests of $3 are skipped; install it with: sudo apt-get install $2"
    SELFPLAY_TESTS_WITHOUT="$SELFPLAY_TESTS_WITHOUT $1"
  fi
}
need bwrap bubblewrap "the sandbox's full isolation"
need chromium chromium "the dashboard in a browser"
export SELFPLAY_TESTS_WITHOUT

# The whole suite on one pytest-xdist worker per core (SELFPLAY_TEST_WORKERS=0: none), a file to a
# worker (tests of one file share module fixtures); each worker's torch gets its share of the cores
# (tests/conftest.py). A selection given as arguments runs in this one process.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
WORKERS=()
if [ $# -eq 0 ] && [ "${SELFPLAY_TEST_WORKERS:-}" != 0 ]; then
  # --durations: the CI log shows where the suite's time goes
  WORKERS=(-n "${SELFPLAY_TEST_WORKERS:-$(nproc 2>/dev/null || echo 2)}" --dist loadfile --durations=15)
fi
status=0
python -m pytest -q "${WORKERS[@]}" "$@" || status=$?
# The vLLM engine's tests run in their own environment (scripts/test_vllm.sh), with the whole suite.
if [ -n "$VLLM_INSTALL" ]; then
  if ! wait "$VLLM_INSTALL"; then
    echo "[test] building the vLLM environment failed; its log, $VLLM_LOG, ends:"
    tail -20 "$VLLM_LOG"
    exit 1
  fi
  bash "$HERE/test_vllm.sh" || status=$?
fi
exit $status
