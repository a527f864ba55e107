"""What a grading uid may own outside any namespace, found and cleared before the uid serves another grading.

The strict box's namespaces take a grading's mounts, processes, IPC objects and sockets with them; they do not take
what the kernel keeps per uid. A uid's user keyring, user-session keyring and persistent keyring live in the
machine's user namespace (the box makes no user namespace of its own) until someone clears them, and the keys in
them count against that uid's key quota (/proc/sys/kernel/keys/maxkeys, maxbytes): a submission could leave a key
for the next grading given the same uid, or fill the quota so that the next one can make no key. At the basic level
(no namespaces) the host's world-writable folders and its System V IPC tables are shared as well.

`clear(uid)` clears all of it, and says what it could not clear: the caller (grader/sandbox/uids.py) then never
gives that uid to another grading. In order:

1. processes: a process of the uid kills every other one (kill -1, as in isolate), until none is left in /proc;
2. keyrings: the same process invalidates the uid's user, user-session and persistent keyrings (keyctl(2)), which
   unlinks every key in them (the kernel makes fresh, empty ones when they are next asked for), and removes the
   POSIX message queues the uid owns in this IPC namespace;
3. the check: once the kernel's key collector has run, the uid owns no key at all (/proc/key-users);
4. files the uid owns at the top of a world-writable folder (/tmp, /var/tmp, /dev/shm, /dev/mqueue, /run/lock) and
   System V IPC objects it owns or created, removed (only the basic level reaches the host's: the strict box has
   IPC and mount namespaces of its own).

Everything else a uid can own is a process's (POSIX timers, inotify and fanotify marks, file locks, memory
mappings, user namespaces, pending signals, io_uring rings) and the kernel frees it with its last process, which
step 1 sees to; the per-uid counts (RLIMIT_NPROC, RLIMIT_SIGPENDING, inotify instances, user namespaces,
RLIMIT_MSGQUEUE's bytes) fall with what they count.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Callable

SHARED_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue", "/run/lock")   # world-writable on a stock system
SYSV_TABLES = {"shm": "shmctl", "msg": "msgctl", "sem": "semctl"}   # /proc/sysvipc/<table>: its RMID call
IPC_RMID = 0
KILL_SECONDS = 5.0     # for every process of the uid to be gone once killed
COLLECT_SECONDS = 3.0  # for the kernel's key collector to free what the invalidated keyrings held
KEY_USERS = "/proc/key-users"
DONE = "done"          # a clearing child's last line: without it, it died on the way
QUEUES = "/tmp"        # where the clearing child mounts the mqueue file system, over the folder in its view alone


def clear(uid: int, shared: bool = True) -> list[str]:
    """Kill what runs as `uid` and clear what it owns in the kernel and, with `shared`, in this machine's
    world-writable folders and IPC namespace; what could not be cleared, in words (empty: nothing of the uid is
    left). Without `shared` (a strict grading claims or releases the uid: it sees neither) only processes and keys
    are looked for, and a uid that left neither costs no fork."""
    running = bool(processes_of(uid))
    left = _as_uid(uid, running, shared) if running or owned_keys(uid) or shared else []
    keys = _keys_after_collection(uid)
    if keys:
        left.append(f"{keys} kernel keys of the uid outlive the clearing of its keyrings")
    if shared:
        left += _shared_files(uid)
        left += _sysv_objects(uid)
    return left


def _as_uid(uid: int, running: bool, shared: bool) -> list[str]:
    """Steps 1, 2 and (with `shared`) the uid's POSIX message queues, by a forked process of `uid` (only it may name
    that uid's own keyrings); what failed. The queues are files of the IPC namespace's mqueue file system, which the
    child mounts (still root) where only it sees it, in a mount namespace of its own: the machine need not have one
    mounted at /dev/mqueue. Where no namespace can be made, /dev/mqueue (one of SHARED_FOLDERS) is all there is to
    look at."""
    from grader.worker import syscalls   # Linux only, and loaded before the fork: the child only makes calls

    def become_and_clear() -> list[str]:
        queues = False
        if shared:
            try:
                syscalls.unshare(syscalls.CLONE_NEWNS)
                syscalls.mount(None, "/", None, syscalls.MS_REC | syscalls.MS_PRIVATE)   # the machine's: untouched
                syscalls.mount("mqueue", QUEUES, "mqueue", 0)   # over QUEUES, in this child's view alone
                queues = True
            except OSError:
                pass
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        left = _kill_all() if running else []   # not running: nothing can start as the uid, which the caller holds
        if owned_keys(uid):   # none: no keyring of the uid's exists, nor can one now (its processes are gone)
            left += _invalidate_keyrings(syscalls)
        return left + (_remove_owned(QUEUES, uid, "POSIX message queue") if queues else [])

    return _in_child(become_and_clear, "the uid's processes, keyrings and message queues could not be cleared")


def _in_child(action: Callable[[], list[str]], failed: str) -> list[str]:
    """`action`'s lines, run in a forked child (which may change its uid or namespaces, this process keeping its
    own); [`failed`] when it raised or died before it had said all."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:   # only system calls here: the caller may have threads, which the child does not inherit
        said = failed
        try:
            os.close(read_end)
            said = "\n".join([*action(), DONE])
        finally:
            os.write(write_end, said.encode()[-4096:])
            os._exit(0)
    os.close(write_end)
    try:
        chunks = []
        while chunk := os.read(read_end, 4096):
            chunks.append(chunk)
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)
    lines = [line for line in b"".join(chunks).decode("utf-8", "replace").splitlines() if line]
    return lines[:-1] if lines[-1:] == [DONE] else [failed]


def _kill_all() -> list[str]:
    """Kill every process this uid may signal but the caller (kill -1 reaches a forking one too), until none of the
    uid's is left in /proc."""
    deadline = time.monotonic() + KILL_SECONDS
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            return []   # none left to signal
        if not processes_of(os.getuid(), but=os.getpid()):
            return []
        if time.monotonic() > deadline:
            return ["processes of the uid are still alive after being killed"]
        time.sleep(0.01)


def processes_of(uid: int, but: int = 0) -> list[int]:
    """The live processes whose real uid is `uid` (in this pid namespace; zombies are already dead), but `but`."""
    return [pid for pid, real in _live_processes() if real == uid and pid != but]


def running_uids() -> set[int]:
    """The real uids of this machine's live processes (in this pid namespace)."""
    return {real for _, real in _live_processes()}


def _live_processes() -> list[tuple[int, int]]:
    """(pid, real uid) of each process but zombies, from /proc/<pid>/status (`State:\tZ`, `Uid:\t<real> ...`)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/status", "rb") as fh:
                    text = fh.read(4096)
                state = text.index(b"\nState:") + 8
                if text[state:state + 2].strip()[:1] != b"Z":
                    uid = text.index(b"\nUid:") + 5
                    found.append((int(entry), int(text[uid:text.index(b"\n", uid)].split()[0])))
            except (OSError, ValueError, IndexError):
                continue
    return found


def _invalidate_keyrings(syscalls) -> list[str]:
    """Invalidate the caller's user, user-session and persistent keyrings: every key in them is unlinked, and the
    kernel makes fresh, empty ones when next asked."""
    left = []
    rings = {"user keyring": syscalls.KEY_SPEC_USER_KEYRING,
             "user-session keyring": syscalls.KEY_SPEC_USER_SESSION_KEYRING}
    try:   # both found before either goes: the user-session keyring is found through the user keyring
        found = {name: syscalls.keyctl(syscalls.KEYCTL_GET_KEYRING_ID, spec, 1) for name, spec in rings.items()}
    except OSError as error:
        if error.errno in (errno.ENOSYS, errno.EPERM):
            return []   # the key system calls are refused here (a seccomp profile): nobody made a key
        return [f"the uid's keyrings could not be found: {error.strerror}"]
    for name, serial in found.items():
        try:
            syscalls.keyctl(syscalls.KEYCTL_INVALIDATE, serial)
        except OSError as error:
            left.append(f"the uid's {name} could not be invalidated: {error.strerror}")
    try:   # made for the uid if it had none (it is invalidated at once); kept in this process's thread keyring
        persistent = syscalls.keyctl(syscalls.KEYCTL_GET_PERSISTENT, -1, syscalls.KEY_SPEC_THREAD_KEYRING)
        syscalls.keyctl(syscalls.KEYCTL_INVALIDATE, persistent)
    except OSError as error:
        if error.errno != errno.EOPNOTSUPP:   # a kernel without persistent keyrings
            left.append(f"the uid's persistent keyring could not be invalidated: {error.strerror}")
    return left


def _keys_after_collection(uid: int) -> int:
    """The keys `uid` still owns once the kernel's key collector has freed what it can (0 at once when none)."""
    deadline = time.monotonic() + COLLECT_SECONDS
    while True:
        count = owned_keys(uid)
        if count == 0 or time.monotonic() > deadline:
            return count
        time.sleep(0.02)


def owned_keys(uid: int) -> int:
    """How many kernel keys `uid` owns (/proc/key-users: `uid: usage nkeys/ninstantiated ...`); 0 without keys."""
    try:
        with open(KEY_USERS) as fh:
            for line in fh:
                owner, _, rest = line.partition(":")
                if owner.strip() == str(uid):
                    return int(rest.split()[1].split("/")[0])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _shared_files(uid: int) -> list[str]:
    """Remove what `uid` owns at the top of the world-writable folders (a folder with all in it); links are never
    followed."""
    return [said for folder in SHARED_FOLDERS for said in _remove_owned(folder, uid, "file")]


def _remove_owned(folder: str, uid: int, what: str) -> list[str]:
    """Remove each entry of `folder` that `uid` owns (a folder with all in it, never following a link); what could
    not be removed."""
    left = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []   # not on this machine
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)
            if info.st_uid != uid:
                continue
            if stat.S_ISDIR(info.st_mode):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        except FileNotFoundError:
            continue
        except OSError as error:
            left.append(f"the uid's {what} {entry.path} could not be removed: {error.strerror}")
        except RecursionError:   # shutil.rmtree recurses: a tree thousands of folders deep, which rm(1) is not
            subprocess.run(["rm", "-rf", "--one-file-system", "--", entry.path], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
            if os.path.lexists(entry.path):
                left.append(f"the uid's {what} {entry.path} is too deep to remove")
    return left


def _sysv_objects(uid: int) -> list[str]:
    """Remove the System V shared memory segments, message queues and semaphore sets `uid` owns or created in this
    IPC namespace (the host's at the basic level; the strict box has a namespace of its own, gone with it)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    left = []
    for table, call in SYSV_TABLES.items():
        try:
            with open(f"/proc/sysvipc/{table}") as fh:
                header, *rows = [line.split() for line in fh if line.strip()]
        except (OSError, ValueError):
            continue
        columns = {name: i for i, name in enumerate(header)}
        for row in rows:
            try:
                owners = {int(row[columns["uid"]]), int(row[columns["cuid"]])}
                ident = int(row[1])   # shmid, msqid, semid
            except (KeyError, ValueError, IndexError):
                continue
            if uid not in owners:
                continue
            result = (libc.semctl(ident, 0, IPC_RMID) if table == "sem" else
                      getattr(libc, call)(ident, IPC_RMID, None))
            if result != 0 and ctypes.get_errno() not in (errno.EINVAL, errno.EIDRM):
                left.append(f"System V {table} {ident}, the uid's, could not be removed: "
                            f"{os.strerror(ctypes.get_errno())}")
    return left
