#!/usr/bin/env bash
# Quick start 2/2: set up (venv + install with test extras, and the system tools some tests need:
# bubblewrap for the sandbox's outer isolation, Chromium for the dashboard's screenshots) and run the
# whole test suite, and beside it the vLLM engine's tests in their own environment (scripts/test_vllm.sh).
#   bash scripts/test.sh [pytest args]
# A tool that cannot be installed here (not root with apt) is named in one line, and only the tests
# that need it are skipped.
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/setup_env.sh" "[dev]"
# The whole suite also needs the vLLM environment (minutes of downloads on a fresh machine): it is
# built in the background, and its tests run there as soon as it is ready, beside the main suite
# (they keep one core busy while the main suite's workers wait on their subprocesses).
VLLM_JOB="" VLLM_LOG="${TMPDIR:-/tmp}/selfplay-vllm.$$.log"
if [ $# -eq 0 ]; then
  echo "[test] building the vLLM environment and running its tests in the background (log: $VLLM_LOG)"
  ( if ! bash "$HERE/test_vllm.sh" --install-only > "$VLLM_LOG.install" 2>&1; then
      echo "[test] building the vLLM environment failed; its log, $VLLM_LOG.install, ends:"
      tail -20 "$VLLM_LOG.install"
      exit 1
    fi
    bash "$HERE/test_vllm.sh" --durations=5 ) > "$VLLM_LOG" 2>&1 &
  VLLM_JOB=$!
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
  # --durations: the CI log shows where the suite's time goes; --no-loadscope-reorder: the order of
  # tests/conftest.py (the files with the most slow tests first)
  WORKERS=(-n "${SELFPLAY_TEST_WORKERS:-$(nproc 2>/dev/null || echo 2)}" --dist loadfile --no-loadscope-reorder --durations=15)
fi
status=0
python -m pytest -q "${WORKERS[@]}" "$@" || status=$?
# The vLLM engine's tests (scripts/test_vllm.sh, started above): their result follows the main suite's.
if [ -n "$VLLM_JOB" ]; then
  wait "$VLLM_JOB" || status=$?
  echo "[test] the vLLM engine's tests (tests/vllm, in .venv-vllm):"
  cat "$VLLM_LOG"
fi
exit $status
