"""What the grader writes outside the box is the grader's alone, whatever the umask and whatever came before.

At the basic level there is no box: student code runs on the host's file system, as a grading uid of its own
(as root) or as the grading user, and reads whatever that uid may. So every folder the grader keeps there (the
reference cache, a class's gradebook folder with its reports, unpacked zips and fetched repositories) is made
owner-only each time a command uses it: a folder created by an older grader, or under a permissive umask, is
closed again, and nothing below a closed folder can be reached by another uid whatever its own mode. A
grading's scratch folder is lent to its uid for the grading alone (grader/sandbox/scratch.py).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

OWNER_ONLY = 0o700


def private_folder(path: Path) -> Path:
    """`path` as a folder only its owner can enter, created when missing; an existing one is closed (0700).
    Folders created above it get the umask's mode: nothing of the grader's lies between them and it."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, OWNER_ONLY)
    return path


def seal(folder: Path) -> None:
    """Make the grader's own files under `folder` owner-only (folders 0700, files 0600), links left alone.
    Only for what no student code has written: a path is changed by name."""
    for root, _folders, files in os.walk(folder):
        os.chmod(root, OWNER_ONLY)
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, 0o600)


def open_to_others(path: Path) -> bool:
    """Whether a user who is neither the owner nor in the group can reach `path`: pass through every folder above
    it, and enter it (a folder: names in it can be guessed) or read it (a file). The grading uids are such users:
    no group is theirs."""
    path = path.absolute()
    try:
        if any(not os.stat(folder).st_mode & stat.S_IXOTH for folder in path.parents):
            return False
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return bool(mode & (stat.S_IXOTH if stat.S_ISDIR(mode) else stat.S_IROTH))
