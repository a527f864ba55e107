#!/usr/bin/env bash
# Install torch 2.13.0 and numpy into the environment of the Python named by $1 (default: python3), a virtual
# environment's (`python3 -m venv .venv`, then `bash install-torch.sh .venv/bin/python`).
# PyTorch's CPU-only index first (about 190 MB): on Linux, PyPI's torch is the CUDA build, about 4.8 GB with 15
# nvidia-* packages. Where that index cannot be used, it says why within seconds, then installs PyPI's build and
# says which build that is. A torch 2.13.0 already there is kept.
set -euo pipefail
python="${1:-python3}"
pip=("$python" -m pip install --quiet --disable-pip-version-check)
CPU_INDEX=https://download.pytorch.org/whl/cpu

if ! command -v "$python" >/dev/null 2>&1; then
    echo "install-torch: there is no Python at '$python'" >&2
    exit 2
fi
# PEP 668 (Debian 12, Ubuntu 24.04, Homebrew): the system's own Python refuses pip installs
# ("externally-managed-environment"); a virtual environment made from it does not.
if "$python" -c 'import os, sys, sysconfig
sys.exit(not (sys.prefix == sys.base_prefix
              and os.path.isfile(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))))' 2>/dev/null; then
    cat >&2 <<EOF
install-torch: $python is the system's own Python, which lets no one install packages into it with pip
(PEP 668: pip would stop with "externally-managed-environment"). Make a virtual environment and install there:
    $python -m venv .venv
    bash $0 .venv/bin/python
EOF
    exit 2
fi
if ! "$python" -m pip --version >/dev/null 2>&1; then
    echo "install-torch: $python has no pip. Make a virtual environment ($python -m venv .venv; on Debian and" \
         "Ubuntu that needs the python3-venv package) and pass its Python: bash $0 .venv/bin/python" >&2
    exit 2
fi

# What is installed: "2.13.0+cpu (CPU only)", "2.13.0 (CUDA build)", or nothing
installed() {
    "$python" - <<'EOF' 2>/dev/null
import importlib.metadata as m
version = m.version("torch")
cuda = any(r.startswith("nvidia-") for r in m.requires("torch") or [])
print(f"{version} ({'CUDA build' if cuda else 'CPU only'})")
EOF
}

now="$(installed || true)"
if [ "${now%%[+ ]*}" = "2.13.0" ]; then
    echo "torch: $now is already installed"
elif out="$("${pip[@]}" --timeout 5 --retries 0 --index-url "$CPU_INDEX" torch==2.13.0 2>&1)"; then
    echo "torch: installed $(installed) from PyTorch's CPU-only index"
else
    # pip's last words say "no matching distribution" even where the index was never reached: ask the index itself
    probe='import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1], timeout=5).close()
except Exception as exc:
    print(getattr(exc, "reason", None) or exc)
    sys.exit(1)'
    if ! reason="$("$python" -c "$probe" "$CPU_INDEX/torch/" 2>&1)"; then
        reason="${CPU_INDEX%%/whl*} could not be reached ($reason)"
    else
        reason="$(printf '%s\n' "$out" | grep -E '^(ERROR|error)' | tail -1)"
    fi
    echo "torch: PyTorch's CPU-only index ($CPU_INDEX) could not be used: ${reason:-pip gave no reason}"
    if [ "$(uname -s)" = Linux ]; then
        echo "torch: installing torch 2.13.0 from PyPI instead. On Linux PyPI's build is the CUDA one: a download of" \
             "about 4.8 GB with 15 nvidia-* packages (the CPU-only build is about 190 MB). It runs on the CPU too."
    else
        echo "torch: installing torch 2.13.0 from PyPI instead (on $(uname -s) PyPI's build is the one to use)"
    fi
    "${pip[@]}" torch==2.13.0
    echo "torch: installed $(installed) from PyPI"
fi
# safetensors.torch serialises through numpy, which the torch wheel does not require
"${pip[@]}" "numpy>=1.26"
