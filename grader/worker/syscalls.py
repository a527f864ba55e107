"""The few Linux calls Python lacks (mount, umount2, pivot_root, prctl, keyctl, unshare before 3.12), through the libc
already loaded.

`ctypes.CDLL(None)` finds them in the running process: no `ctypes.util.find_library`, which forks
`ldconfig` and writes a temporary file, both of which fail in a child whose process or file limits are
spent (a neighbour's fork bomb once made every child of a grading die before the student's import).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 36, 38
# unshare(2)'s namespaces: a fork server's child takes a fresh one of each (grader/worker/spawn.py).
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x20000, 0x4000000, 0x8000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
# keyctl(2), which glibc does not wrap (libkeyutils does, and is not everywhere): the kernel's key retention service.
SYS_KEYCTL = {"x86_64": 250, "aarch64": 219, "riscv64": 219, "ppc64le": 271, "s390x": 280}
KEYCTL_GET_KEYRING_ID, KEYCTL_JOIN_SESSION_KEYRING, KEYCTL_READ = 0, 1, 11
KEYCTL_INVALIDATE, KEYCTL_GET_PERSISTENT = 21, 22
KEY_SPEC_THREAD_KEYRING, KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING = -1, -4, -5

_libc = ctypes.CDLL(None, use_errno=True)
for _name, _args in (("mount", [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]),
                     ("umount2", [ctypes.c_char_p, ctypes.c_int]),
                     ("prctl", [ctypes.c_int] + [ctypes.c_ulong] * 4),
                     ("unshare", [ctypes.c_int])):
    getattr(_libc, _name).argtypes = _args
_libc.syscall.restype = ctypes.c_long   # keyctl returns a key's serial, a long


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _bytes(value: str | None) -> bytes | None:
    return None if value is None else os.fsencode(value)


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(_bytes(source), _bytes(target), _bytes(fstype), flags, _bytes(data)),
           f"cannot mount on {target}")


def umount(target: str, flags: int = 0) -> None:
    _check(_libc.umount2(_bytes(target), flags), f"cannot unmount {target}")


def pivot_root(new_root: str, put_old: str) -> None:
    number = SYS_PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise OSError(f"pivot_root: unknown system call number on {platform.machine()}")
    _check(_libc.syscall(number, _bytes(new_root), _bytes(put_old)), "cannot pivot_root")


def keyctl(operation: int, *args: int | bytes | None) -> int:
    """keyctl(2) with integer (or buffer) arguments; its result, or OSError with the kernel's errno."""
    number = SYS_KEYCTL.get(platform.machine())
    if number is None:
        raise OSError(errno.ENOSYS, f"keyctl: unknown system call number on {platform.machine()}")
    values = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    result = _libc.syscall(number, ctypes.c_long(operation), *values)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"keyctl({operation}): {os.strerror(err)}")
    return result


def prctl(option: int, value: int) -> None:
    _check(_libc.prctl(option, value, 0, 0, 0), f"prctl({option})")


def unshare(flags: int) -> None:
    """Take fresh namespaces of `flags` (CLONE_NEW*); a new pid namespace is the next child's, not the caller's."""
    _check(_libc.unshare(flags), "cannot unshare namespaces")
