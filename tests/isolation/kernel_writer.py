"""A submission that leaves a mark (`MARK`, filled in by the test) in what the kernel keeps for its uid rather than
for its namespaces, for the next grading given the same uid to look for (tests/isolation/kernel_seeker.py): a key in
each keyring it can reach (user, user-session, session, persistent, a named session keyring linked into the user
keyring), its uid's whole key quota, a file in each world-writable folder, a System V and a POSIX message queue, and
its uid's whole message queue bytes (RLIMIT_MSGQUEUE). It prints `UID <uid>`, `REQUEST_KEY <errno>` (what
request_key(2) said), `PLANTED <n>` (the places it wrote), `FILLED <keys>` (the keys it added before the quota
refused one) and `QUEUES <n>` (the largest queues it made before RLIMIT_MSGQUEUE refused one), the proof that it ran.
Then its functions raise."""

import ctypes
import errno
import os

# The test puts kernel_calls.py's text in place of this import: a submission is one file.
from kernel_calls import (LARGEST_QUEUE, REQUEST_KEY, SESSION, THREAD, USER, USER_SESSION, add_key,
                          keyctl, libc)

MARK = "@MARK@"
planted = 0


print("UID", os.getuid(), flush=True)
# A key the kernel does not hold, with callout information: the kernel would run /sbin/request-key as root, outside
# every namespace, to make it (keyutils' upcall), and the error says whether it tried.
asked = libc.syscall(REQUEST_KEY, b"user", f"debug:{MARK}".encode(), MARK.encode(), ctypes.c_int(0))
print("REQUEST_KEY", errno.errorcode.get(ctypes.get_errno(), "none") if asked < 0 else "made", flush=True)
for keyring in (USER, USER_SESSION, SESSION):
    try:
        add_key(MARK, MARK.encode(), keyring)
        planted += 1
    except OSError:
        pass
try:
    add_key(MARK, MARK.encode(), keyctl(22, -1, THREAD))   # KEYCTL_GET_PERSISTENT, kept in the thread keyring
    planted += 1
except OSError:
    pass
try:   # a named session keyring, kept alive by a link from the user keyring; the next one joins it by name
    named = keyctl(1, MARK.encode())   # KEYCTL_JOIN_SESSION_KEYRING
    keyctl(5, named, 0x3F3F0000)       # KEYCTL_SETPERM: its owner may find it by name
    add_key(MARK, MARK.encode(), named)
    keyctl(8, named, USER)   # KEYCTL_LINK
    planted += 1
except OSError:
    pass
filled = 0
try:
    for i in range(100000):   # the uid's key quota (maxkeys, maxbytes), spent
        add_key(f"fill{i}", b"x" * 64, USER)
        filled += 1
except OSError:
    pass
for folder in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock"):
    try:
        with open(os.path.join(folder, MARK), "w") as fh:
            fh.write(MARK)
        planted += 1
    except OSError:
        pass
key = int(MARK[-6:], 16)   # the mark names the System V key too
if libc.msgget(key, 0o1000 | 0o666) >= 0:   # IPC_CREAT
    planted += 1
queues = 0
if hasattr(libc, "mq_open"):
    if libc.mq_open(("/" + MARK).encode(), os.O_CREAT | os.O_RDWR, 0o666, None) >= 0:
        planted += 1
    for i in range(1000):   # its uid's message queue bytes (RLIMIT_MSGQUEUE), spent
        if libc.mq_open(f"/{MARK}-{i}".encode(), os.O_CREAT | os.O_RDWR, 0o600, ctypes.byref(LARGEST_QUEUE)) < 0:
            break
        queues += 1
print("PLANTED", planted, flush=True)
print("FILLED", filled, flush=True)
print("QUEUES", queues, flush=True)


def split_heads(x, n_heads):
    raise ValueError("not an implementation")


def merge_heads(x):
    raise ValueError("not an implementation")
