# Sourced by demo.sh and test.sh: use the active virtual environment, or create .venv,
# then install the project (CPU torch first, so pip never pulls a CUDA build here).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [ -z "${VIRTUAL_ENV:-}" ]; then
  if [ ! -x .venv/bin/python ]; then
    echo "[setup] creating virtual environment .venv"
    python3 -m venv .venv
  fi
  # shellcheck disable=SC1091
  source .venv/bin/activate
fi
PY=python
$PY -m pip install -q --upgrade pip >/dev/null
if ! $PY -c "import torch" 2>/dev/null; then
  echo "[setup] installing torch (CPU build; set TORCH_SPEC to choose another)"
  $PY -m pip install -q "${TORCH_SPEC:-torch==2.13.0}"
fi
echo "[setup] installing the project ($*)"
$PY -m pip install -q -e ".${1:-}"
