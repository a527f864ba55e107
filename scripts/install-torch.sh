#!/usr/bin/env bash
# Install torch 2.13.0 (CPU) and numpy into the environment of the Python named by $1 (default: python3).
# PyTorch's CPU-only index first: the default index serves a CUDA build of several GB. Where that index cannot be
# reached, it fails within seconds and the default index is used; a matching torch already there is kept.
set -euo pipefail
python="${1:-python3}"
pip=("$python" -m pip install --quiet --disable-pip-version-check)

if "$python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("torch").split("+")[0] != "2.13.0")' 2>/dev/null; then
    echo "torch: 2.13.0 is already installed"
elif "${pip[@]}" --timeout 5 --retries 0 --index-url https://download.pytorch.org/whl/cpu torch==2.13.0 2>/dev/null; then
    echo "torch: installed 2.13.0 from PyTorch's CPU-only index"
else
    echo "torch: PyTorch's CPU-only index could not be used; installing 2.13.0 from the default index"
    "${pip[@]}" torch==2.13.0
fi
# safetensors.torch serialises through numpy, which the torch wheel does not require
"${pip[@]}" "numpy>=1.26"
