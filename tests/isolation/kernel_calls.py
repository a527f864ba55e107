"""The key and message queue system calls that tests/isolation/kernel_writer.py and kernel_seeker.py make, through
ctypes as a submission would. The test puts this file's text where each of them imports it: a submission is one
file."""

import ctypes
import os
import platform

KEYCTL = {"x86_64": 250, "aarch64": 219}[platform.machine()]
ADD_KEY = {"x86_64": 248, "aarch64": 217}[platform.machine()]
REQUEST_KEY = {"x86_64": 249, "aarch64": 218}[platform.machine()]
USER, USER_SESSION, SESSION, THREAD = -4, -5, -3, -1   # the KEY_SPEC_* keyrings
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.msgget.restype = ctypes.c_int
if hasattr(libc, "mq_open"):
    libc.mq_open.restype = ctypes.c_int


def keyctl(*args):
    result = libc.syscall(KEYCTL, *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    if result < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return result


def add_key(description, payload, keyring):
    result = libc.syscall(ADD_KEY, b"user", description.encode(), payload, ctypes.c_size_t(len(payload)),
                          ctypes.c_int(keyring))
    if result < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return result


class QueueAttributes(ctypes.Structure):
    """struct mq_attr"""
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long),
                ("curmsgs", ctypes.c_long), ("reserved", ctypes.c_long * 4)]


LARGEST_QUEUE = QueueAttributes(0, 10, 8192, 0)   # the most an unprivileged process may ask for (msg_max, msgsize_max)
