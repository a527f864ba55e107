"""A submission that looks for what an earlier one given the same uid (tests/isolation/kernel_writer.py) left in the
kernel's state for that uid (`MARK`, filled in by the test), and prints `TRACE <where>` for each trace it finds. Each
look has a positive control: the seeker first plants a control mark of its own where that look would see it
(`CONTROL <where>` for each control it finds again; one missing means the look is blind). It prints `UID <uid>`,
`ADDED <n>`, the keys of `WANTED` its uid's key quota let it add, and `QUEUE_ROOM 1` when its uid's message queue
bytes (RLIMIT_MSGQUEUE) let it make the largest queue it may ask for. Then its functions raise."""

import ctypes
import os

# The test puts kernel_calls.py's text in place of this import: a submission is one file.
from kernel_calls import (LARGEST_QUEUE, SESSION, THREAD, USER, USER_SESSION, add_key,
                          keyctl, libc)

MARK = "@MARK@"
CONTROL = "control" + MARK[::-1]
WANTED = 20
FOLDERS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
said = []


def has_key(keyring, description):
    try:
        keyctl(10, keyring, b"user", description.encode(), 0)   # KEYCTL_SEARCH
        return True
    except OSError:
        return False


def attempt(call, *args):
    """A control's step: where it fails (its uid's key quota spent), its look finds no control, and says so."""
    try:
        return call(*args)
    except OSError:
        return None


def look(where, found, mark):
    if found:
        said.append(("TRACE " if mark == MARK else "CONTROL ") + where)


def persistent():
    return keyctl(22, -1, THREAD)   # KEYCTL_GET_PERSISTENT, kept in the thread keyring


def join_named(name):
    """Join the session keyring called `name` (one is made when none can be found); its serial."""
    return keyctl(1, name.encode())   # KEYCTL_JOIN_SESSION_KEYRING


def sysv_key(mark):
    return int(MARK[-6:], 16) ^ (mark != MARK)


print("UID", os.getuid(), flush=True)
added = 0
for i in range(WANTED):   # before any control is made: the quota as the grading found it
    try:
        add_key(f"quota{i}", b"y" * 64, THREAD)
        added += 1
    except OSError:
        break
keyctl(7, THREAD)   # KEYCTL_CLEAR: they have proved their point
room = 0   # the largest queue an unprivileged process may ask for, which a spent RLIMIT_MSGQUEUE refuses
if hasattr(libc, "mq_open"):
    room = int(libc.mq_open(f"/{CONTROL}-room".encode(), os.O_CREAT | os.O_RDWR, 0o600,
                            ctypes.byref(LARGEST_QUEUE)) >= 0)

# The session keyring it started with first (joining a named one below leaves it): the control, then the looks.
attempt(add_key, CONTROL, CONTROL.encode(), SESSION)
for mark in (CONTROL, MARK):
    look("session keyring", has_key(SESSION, mark), mark)
# The other controls, where each look would see them.
for keyring in (USER, USER_SESSION):
    attempt(add_key, CONTROL, CONTROL.encode(), keyring)
attempt(lambda: add_key(CONTROL, CONTROL.encode(), persistent()))


def named_control():
    ring = join_named(CONTROL)
    keyctl(5, ring, 0x3F3F0000)   # KEYCTL_SETPERM, as the writer does
    add_key(CONTROL, CONTROL.encode(), ring)
    keyctl(8, ring, USER)         # KEYCTL_LINK: kept alive by the user keyring, as the writer's


attempt(named_control)
attempt(keyctl, 1, None)          # a fresh anonymous session keyring: the named one is found by name again
folders = []
for folder in FOLDERS:
    try:
        with open(os.path.join(folder, CONTROL), "w") as fh:
            fh.write(CONTROL)
        folders.append(folder)   # where it cannot write, the writer could not either
    except OSError:
        pass
libc.msgget(sysv_key(CONTROL), 0o1000 | 0o600)   # IPC_CREAT
has_mq = hasattr(libc, "mq_open")
if has_mq:
    libc.mq_open(("/" + CONTROL).encode(), os.O_CREAT | os.O_RDWR, 0o600, None)

for mark in (CONTROL, MARK):
    for name, keyring in (("user keyring", USER), ("user-session keyring", USER_SESSION)):
        look(name, has_key(keyring, mark), mark)
    look("persistent keyring", attempt(lambda m: has_key(persistent(), m), mark), mark)
    look("named session keyring", attempt(lambda m: has_key(join_named(m), m), mark), mark)
    for folder in folders:
        look(f"file {folder}", os.path.exists(os.path.join(folder, mark)), mark)
    look("System V message queue", libc.msgget(sysv_key(mark), 0) >= 0, mark)
    look("POSIX message queue", has_mq and libc.mq_open(("/" + mark).encode(), os.O_RDWR, 0, None) >= 0, mark)
for line in said:
    print(line)
print("ADDED", added, flush=True)
print("QUEUE_ROOM", room, flush=True)


def split_heads(x, n_heads):
    raise ValueError("not an implementation")


def merge_heads(x):
    raise ValueError("not an implementation")
