#!/usr/bin/env bash
# Install specbench with the official vLLM GPU build into ./.venv-gpu and run suites/gpu-smoke.yaml
# (the CPU zoo on CUDA: every method inside vLLM, DSpark included, cross-checked against the
# reference engine). Needs Python >= 3.10, an NVIDIA GPU and PyPI; the models are built locally (no hub).
#
#   bash scripts/gpu-smoke.sh                  # install (idempotent) + run; the report lands in reports/
#   bash scripts/gpu-smoke.sh --limit 4        # extra arguments go to `specbench run`
#
# Facts this encodes (docs/getting-started.md, "Installing on other machines"):
# - `pip install -e '.[gpu]'` pulls the official `vllm` wheel (CUDA torch, Triton for model runner V2).
# - speculators 0.9.0 is installed --no-deps (its pins fight vLLM's); of what it imports, vLLM brings
#   transformers, safetensors, tokenizers and huggingface_hub, specbench pydantic-settings; loguru is added.
# - DSpark runs only on vLLM's model runner V2: specbench sets VLLM_USE_V2_MODEL_RUNNER=1 for it on cuda.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv-gpu}"
BUDGET_S="${BUDGET_S:-600}"   # the run (not the install) must finish within this many seconds

PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  for c in python3.12 python3.11 python3; do
    if command -v "$c" >/dev/null && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then PY="$c"; break; fi
  done
fi
[[ -n "$PY" ]] || { echo "gpu-smoke.sh: Python >= 3.11 is required; set PYTHON=" >&2; exit 2; }
command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "gpu-smoke.sh: nvidia-smi not found" >&2

[[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
"${PIP[@]}" install --upgrade pip
"${PIP[@]}" install -e ".[gpu]" loguru
"${PIP[@]}" install --no-deps "speculators==0.9.0" "hs-connectors==0.9.0"
"$VENV/bin/python" - <<'PY'
import torch, vllm, speculators  # noqa: F401
assert torch.cuda.is_available(), "gpu-smoke.sh: torch sees no CUDA device"
from vllm.triton_utils import HAS_TRITON
assert HAS_TRITON, "gpu-smoke.sh: Triton missing: vLLM's model runner V2 (DSpark) needs it"
print(f"gpu-smoke.sh: vllm {vllm.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
PY

"$VENV/bin/specbench" validate suites/gpu-smoke.yaml
"$VENV/bin/specbench" assets --train          # the zoo (CPU training, cached): not counted in the run's budget
"$VENV/bin/specbench" run suites/gpu-smoke.yaml --dry-run --platform cuda
start=$(date +%s)
timeout "$BUDGET_S" "$VENV/bin/specbench" run suites/gpu-smoke.yaml --platform cuda "$@"
echo "gpu-smoke.sh: run took $(( $(date +%s) - start )) s (budget ${BUDGET_S} s); see the report's 'Reference cross-check'"
