# Sourced by demo.sh and test.sh: use the active virtual environment, or create .venv,
# then install the project (CPU torch first, so pip never pulls a CUDA build here).
# The install runs only when this checkout, its pyproject.toml or the extras asked for differ
# from what the environment holds: reinstalling on every start costs seconds and repeats
# pip's and setuptools' notices.
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
STAMP="$VIRTUAL_ENV/.selfplay-installed"  # one line per extras installed from this checkout and pyproject
INSTALLED="$ROOT $(sha256sum pyproject.toml | cut -d' ' -f1)"
if ! grep -qxF "$INSTALLED ${1:-}" "$STAMP" 2>/dev/null || ! command -v selfplay >/dev/null; then
  $PY -m pip install -q --upgrade pip >/dev/null
  if ! $PY -c "import torch" 2>/dev/null; then
    echo "[setup] installing torch (CPU build; set TORCH_SPEC to choose another)"
    $PY -m pip install -q "${TORCH_SPEC:-torch==2.13.0}"
  fi
  echo "[setup] installing the project ($*)"
  # setuptools ends an editable install with a 10-line "Editable installation." box (a
  # UserWarning) about same-named folders in the working directory: advice, not a problem.
  PYTHONWARNINGS="ignore:Editable installation:UserWarning" $PY -m pip install -q -e ".${1:-}"
  { grep -F "$INSTALLED " "$STAMP" 2>/dev/null || true; echo "$INSTALLED ${1:-}"; } > "$STAMP.tmp"
  mv "$STAMP.tmp" "$STAMP"
fi
