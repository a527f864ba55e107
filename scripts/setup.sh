#!/usr/bin/env bash
# Install everything the grader needs into .venv (idempotent).
#   bash scripts/setup.sh          the grader
#   bash scripts/setup.sh --test   the grader, its test dependencies, Chromium and CJK fonts for the HTML report tests
set -euo pipefail
cd "$(dirname "$0")/.."

# The sandboxed worker runs as an unprivileged user, who must be able to read the interpreter: use a
# system Python (a pyenv or conda Python under root's home folder is unreadable to that user).
python="${GRADER_PYTHON:-}"
if [ -z "$python" ]; then
    for candidate in /usr/bin/python3.11 /usr/bin/python3 "$(command -v python3.11 || true)" "$(command -v python3 || true)"; do
        if [ -n "$candidate" ] && [ -x "$candidate" ] && "$candidate" -c 'import sys, venv; assert sys.version_info >= (3, 11)' 2>/dev/null; then
            python="$candidate"; break
        fi
    done
fi
[ -n "$python" ] || { echo "setup: no Python 3.11+ with venv found; set GRADER_PYTHON" >&2; exit 1; }

[ -x .venv/bin/python ] || "$python" -m venv .venv
# The CPU wheel first: a bare `torch` requirement would pull a CUDA build of several GB.
bash scripts/install-torch.sh .venv/bin/python
if [ "${1:-}" = "--test" ]; then
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[test]"
    # Chromium renders the HTML report in its tests; fonts-noto-cjk gives the Chinese report its glyphs
    # (without it Chinese text is drawn as boxes in the screenshots); slurm-wlm and munge run the one-node SLURM
    # that `--cluster slurm` is tested on.
    missing=""
    command -v chromium >/dev/null 2>&1 || missing="chromium"
    dpkg -s fonts-noto-cjk >/dev/null 2>&1 || missing="$missing fonts-noto-cjk"
    dpkg -s slurm-wlm >/dev/null 2>&1 || missing="$missing slurm-wlm"
    dpkg -s munge >/dev/null 2>&1 || missing="$missing munge"
    if [ -n "$missing" ]; then
        if [ "$(id -u)" = 0 ]; then
            # shellcheck disable=SC2086  # one word per package
            apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
        else
            echo "setup: the HTML report tests need Debian's$missing: sudo apt-get install -y$missing" >&2
        fi
    fi
else
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e .
fi

# The strict sandbox's unprivileged user must be able to reach .venv and grader/ through every folder above
# them. As root (the only user the strict level serves), let others *enter* those folders (o+x: no listing,
# no reading); otherwise warn.
dir="$(pwd)"
while [ "$dir" != "/" ]; do
    if [ "$(( $(stat -c '%a' "$dir" | tail -c 2) & 1 ))" = 0 ]; then
        if [ "$(id -u)" = 0 ]; then
            chmod o+x "$dir"
        else
            echo "setup: warning: $dir is not enterable by other users; the strict sandbox (root only) will refuse to run" >&2
        fi
    fi
    dir="$(dirname "$dir")"
done
