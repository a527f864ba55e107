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
# request_key(2), refused to student code by a seccomp filter (`refuse_request_key`), and the filter's words.
SYS_REQUEST_KEY = {"x86_64": 249, "aarch64": 218}
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}   # what seccomp names each system call table
X32_SYSCALL_BIT = 0x40000000   # x86_64's second table (x32), which would name request_key otherwise
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
BPF_LD_W_ABS, BPF_JEQ_K, BPF_JGE_K, BPF_RET_K = 0x20, 0x15, 0x35, 0x06

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


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def refuse_request_key() -> None:
    """From now on request_key(2) fails with ENOSYS in this process and all it starts (no_new_privs must be set).
    The kernel answers a request it cannot satisfy by running /sbin/request-key as root in the machine's own
    namespaces (keyutils' upcall, whose configuration may resolve names on the host's network), whatever namespaces
    the caller is in: student code has no use for it. A system call of another table (i386's `int 0x80`, x32) is
    refused too, as nothing the grader runs makes one."""
    machine = platform.machine()
    if machine not in SYS_REQUEST_KEY:
        raise OSError(errno.ENOSYS, f"seccomp: unknown system call numbers on {machine}")
    refused = SECCOMP_RET_ERRNO | errno.ENOSYS
    program = [(BPF_LD_W_ABS, 0, 0, 4),                              # the table: seccomp_data.arch
               (BPF_JEQ_K, 0, 4, AUDIT_ARCH[machine]),               # another one: refused
               (BPF_LD_W_ABS, 0, 0, 0),                              # seccomp_data.nr
               (BPF_JGE_K, 2, 0, X32_SYSCALL_BIT),                   # x32: refused
               (BPF_JEQ_K, 1, 0, SYS_REQUEST_KEY[machine]),          # request_key: refused
               (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
               (BPF_RET_K, 0, 0, refused)]
    filters = (_SockFilter * len(program))(*[_SockFilter(*step) for step in program])
    fprog = _SockFprog(len(program), filters)
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0), "seccomp filter")


def prctl(option: int, value: int) -> None:
    _check(_libc.prctl(option, value, 0, 0, 0), f"prctl({option})")


def unshare(flags: int) -> None:
    """Take fresh namespaces of `flags` (CLONE_NEW*); a new pid namespace is the next child's, not the caller's."""
    _check(_libc.unshare(flags), "cannot unshare namespaces")
