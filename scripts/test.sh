#!/usr/bin/env bash
# Quick start 2/2: set up (venv + install with test extras, and the system tools some tests need:
# bubblewrap for the sandbox's outer isolation, Chromium for the dashboard's screenshots) and run the
# whole test suite, and beside it the vLLM engine's tests in their own environment (scripts/test_vllm.sh).
#   bash scripts/test.sh [pytest args]
# A tool that cannot be installed here (not root with apt) is named in one line, and only the tests
# that need it are skipped.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
START=$SECONDS
LOGS="${TMPDIR:-/tmp}/selfplay-test.$$"
# The three set-ups are independent and mostly wait on downloads and unpacking, so they run at once:
# the vLLM environment (its own venv; minutes on a fresh machine; its tests follow as soon as it is
# ready, beside the main suite, keeping a core busy while the main suite's workers wait on their
# subprocesses), the system tools (apt), and the main environment (in the foreground).
VLLM_JOB=""
if [ $# -eq 0 ]; then
  echo "[test] building the vLLM environment and running its tests in the background (log: $LOGS.vllm)"
  ( if ! bash "$HERE/test_vllm.sh" --install-only > "$LOGS.vllm.install" 2>&1; then
      echo "[test] building the vLLM environment failed; its log, $LOGS.vllm.install, ends:"
      tail -20 "$LOGS.vllm.install"
      exit 1
    fi
    echo "[test] vLLM environment ready after $((SECONDS - START)) s"
    bash "$HERE/test_vllm.sh" --durations=5 ) > "$LOGS.vllm" 2>&1 &
  VLLM_JOB=$!
fi

# TOOLS: command, apt package, what needs it. Missing ones are installed with apt (root only).
TOOLS=("bwrap bubblewrap the sandbox's full isolation" "chromium chromium the dashboard in a browser")
MISSING=()
for tool in "${TOOLS[@]}"; do
  read -r cmd pkg _ <<< "$tool"
  command -v "$cmd" >/dev/null 2>&1 || MISSING+=("$pkg")
done
APT_JOB=""
if [ ${#MISSING[@]} -gt 0 ] && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "[test] installing ${MISSING[*]} in the background"
  ( apt-get install -y -qq --no-install-recommends "${MISSING[@]}" \
      || { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${MISSING[@]}"; } ) \
    > "$LOGS.apt" 2>&1 &
  APT_JOB=$!
fi

# shellcheck source=setup_env.sh
source "$HERE/setup_env.sh" "[dev]" || exit 1
set +e
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$HOME/.cache/torch_extensions}"
echo "[test] main environment ready after $((SECONDS - START)) s"
if [ $# -eq 0 ]; then
  # DeepSpeed's CPU communication op (a C++ build, about a core-minute, once per machine) is built now,
  # while the other set-ups still wait on downloads; a test that needs it first waits on its lock.
  python -c "from deepspeed.accelerator import get_accelerator as a; a().create_op_builder('ShareMemCommBuilder').load()" \
    > "$LOGS.deepspeed" 2>&1 &
fi
[ -n "$APT_JOB" ] && wait "$APT_JOB" && echo "[test] system tools installed after $((SECONDS - START)) s"
SELFPLAY_TESTS_WITHOUT=""
for tool in "${TOOLS[@]}"; do
  read -r cmd pkg what <<< "$tool"
  if ! command -v "$cmd" >/dev/null 2>&1; then
    echo "[test] $pkg is missing, so the tests of $what are skipped; install it with: sudo apt-get install $pkg"
    SELFPLAY_TESTS_WITHOUT="$SELFPLAY_TESTS_WITHOUT $cmd"
  fi
done
export SELFPLAY_TESTS_WITHOUT
echo "[test] set up in $((SECONDS - START)) s"

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
echo "[test] main suite done after $((SECONDS - START)) s"
# The vLLM engine's tests (scripts/test_vllm.sh, started above): their result follows the main suite's.
if [ -n "$VLLM_JOB" ]; then
  wait "$VLLM_JOB" || status=$?
  echo "[test] the vLLM engine's tests (tests/vllm, in .venv-vllm):"
  cat "$LOGS.vllm"
fi
echo "[test] done in $((SECONDS - START)) s"
exit $status
