#!/usr/bin/env bash
# Install everything the grader needs into .venv (idempotent).
#   bash scripts/setup.sh                 the grader
#   bash scripts/setup.sh --test          the grader, its test dependencies, Chromium, its driver and CJK fonts for the browser tests
#   bash scripts/setup.sh --print-python  only say which Python it would build .venv from (exit 1: none fits)
set -euo pipefail
cd "$(dirname "$0")/.."

# The sandboxed worker's children run as another uid, which must be able to read the interpreter and its standard
# library: a system Python first (/usr/bin, then /usr/local/bin), and one found on PATH only after those (a pyenv
# or conda Python under a home folder is often first on PATH and unreadable to other users). Each must be 3.11+
# with venv and ensurepip (Debian's python3 lacks them without python3-venv).
CANDIDATES="/usr/bin/python3 /usr/bin/python3.13 /usr/bin/python3.12 /usr/bin/python3.11
    /usr/local/bin/python3 /usr/local/bin/python3.13 /usr/local/bin/python3.12 /usr/local/bin/python3.11"
for name in python3 python3.13 python3.12 python3.11; do
    CANDIDATES="$CANDIDATES $(command -v "$name" 2>/dev/null || true)"
done
USABLE='import sys, venv, ensurepip; assert sys.version_info >= (3, 11)'
# Every folder on the way to the interpreter and to its standard library can be entered by others, and the
# interpreter can be read and run by them.
READABLE_BY_OTHERS='
import os, stat, sys
def reachable(path, mode):
    path = os.path.realpath(path)
    folders = [os.path.dirname(path)]
    while folders[-1] != os.path.dirname(folders[-1]):
        folders.append(os.path.dirname(folders[-1]))
    return all(os.stat(f).st_mode & stat.S_IXOTH for f in folders) and os.stat(path).st_mode & mode == mode
assert reachable(sys.executable, stat.S_IROTH | stat.S_IXOTH) and reachable(os.__file__, stat.S_IROTH)'

find_python() {
    local candidate pass
    for pass in readable any; do
        for candidate in $CANDIDATES; do
            [ -x "$candidate" ] && "$candidate" -c "$USABLE" 2>/dev/null || continue
            if [ "$pass" = readable ] && ! "$candidate" -c "$READABLE_BY_OTHERS" 2>/dev/null; then
                continue
            fi
            if [ "$pass" = any ]; then
                # As root the sandbox refuses such a Python (its children could not run it); another user's
                # children run as that user, so it serves there.
                [ "$(id -u)" = 0 ] && return 1
                echo "setup: warning: $candidate is not readable by other users; the strict sandbox (root only) will refuse it" >&2
            fi
            echo "$candidate"
            return 0
        done
    done
    return 1
}

python="${GRADER_PYTHON:-}"
if [ -z "$python" ]; then
    python="$(find_python)" || {
        echo "setup: no Python 3.11+ with venv and ensurepip that other users can read (the sandbox runs student" \
             "code as another uid): install one (Debian, Ubuntu: apt-get install python3-venv) or set GRADER_PYTHON" >&2
        exit 1
    }
fi
if [ "${1:-}" = "--print-python" ]; then
    echo "$python"
    exit 0
fi

[ -x .venv/bin/python ] || "$python" -m venv .venv
# The CPU wheel first: a bare `torch` requirement would pull a CUDA build of several GB.
bash scripts/install-torch.sh .venv/bin/python
if [ "${1:-}" = "--test" ]; then
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[test]"
    # Chromium renders the HTML report in its tests, and chromium-driver lets Selenium drive `grader review` in a
    # real browser (tests/browser.py points Selenium at /usr/bin/chromedriver: it cannot download a driver offline);
    # fonts-noto-cjk gives the Chinese report its glyphs
    # (without it Chinese text is drawn as boxes in the screenshots); slurm-wlm and munge run the one-node SLURM
    # that `--cluster slurm` is tested on.
    missing=""
    command -v chromium >/dev/null 2>&1 || missing="chromium"
    command -v chromedriver >/dev/null 2>&1 || missing="$missing chromium-driver"
    dpkg -s fonts-noto-cjk >/dev/null 2>&1 || missing="$missing fonts-noto-cjk"
    dpkg -s slurm-wlm >/dev/null 2>&1 || missing="$missing slurm-wlm"
    dpkg -s munge >/dev/null 2>&1 || missing="$missing munge"
    if [ -n "$missing" ]; then
        if [ "$(id -u)" = 0 ]; then
            # shellcheck disable=SC2086  # one word per package
            apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
        else
            echo "setup: the browser and cluster tests need Debian's$missing: sudo apt-get install -y$missing" >&2
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
