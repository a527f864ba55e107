"""A submission that looks for what an earlier one (tests/isolation/mark_writer.py) left (`MARK`, filled in by the
test) and prints `TRACE <where>` for each trace it finds. Each look has a positive control: the seeker first plants
a control mark of its own where that look would see it (`CONTROL <where>` for each control it finds again; one
missing means the look is blind). It ends with `FDS <its open descriptors>` and `SOUGHT <paths>`. Then its
functions raise."""

import builtins
import errno
import os
import socket
import stat
import sys
import time

MARK = "@MARK@"
CONTROL = "control" + MARK[::-1]
SKIP = ("/usr", "/opt/grader/site")
OWN = os.path.abspath(__file__)   # this file holds the mark, as the test wrote it in
said = []


def look(where, found, mark):
    if found:
        said.append(("TRACE " if mark == MARK else "CONTROL ") + where)


def files(mark):
    found, count = [], 0
    for top, dirs, names in os.walk("/"):
        dirs[:] = [d for d in dirs if not os.path.join(top, d).startswith(SKIP)]
        for name in names + dirs:
            count += 1
            path = os.path.join(top, name)
            if path == OWN:
                continue
            if mark in name:
                found.append(path)
            try:
                if os.path.isfile(path) and not os.path.islink(path) and os.path.getsize(path) < 4096:
                    with open(path, errors="replace") as fh:
                        if mark in fh.read() and path not in found:
                            found.append(path)
            except OSError:
                pass
    return found, count


def memory(mark):
    places = [name for name, module in list(sys.modules.items()) if mark in getattr(module, "__dict__", {})]
    return places + (["builtins"] if hasattr(builtins, mark) else [])


def environment(mark):
    return [key for key, value in os.environ.items() if mark in key or mark in value]


def socket_of(mark):
    probe = socket.socket(socket.AF_UNIX)
    try:
        probe.connect("\0" + mark)
        return True
    except OSError:
        return False
    finally:
        probe.close()


def other_processes():
    try:
        os.kill(-1, 0)   # any process this uid may signal, but this one
        return True
    except OSError as exc:
        return exc.errno != errno.ESRCH


def descriptors():
    found = []
    for fd in range(1024):
        try:
            found.append(f"{fd}:{stat.S_IFMT(os.fstat(fd).st_mode):o}")
        except OSError:
            pass
    return found


fds_before = descriptors()   # before the controls open anything
# The controls, where each look would see them.
with open("/tmp/" + CONTROL + ".txt", "w") as fh:
    fh.write(CONTROL)
setattr(builtins, CONTROL, CONTROL)
os.environ[CONTROL] = CONTROL
control_socket = socket.socket(socket.AF_UNIX)
control_socket.bind("\0" + CONTROL)
control_socket.listen()
for mark in (CONTROL, MARK):
    found, count = files(mark)
    look("files " + " ".join(found), found, mark)
    look("memory " + " ".join(memory(mark)), memory(mark), mark)
    look("environment", environment(mark), mark)
    look("socket", socket_of(mark), mark)
look("processes", other_processes(), MARK)
child = os.fork()
if child == 0:
    time.sleep(30)
    os._exit(0)
look("processes", other_processes(), CONTROL)
os.kill(child, 9)
os.waitpid(child, 0)
for line in said:
    print(line)
print("FDS", " ".join(fds_before))
print("SOUGHT", count, flush=True)


def split_heads(x, n_heads):
    raise ValueError("not an implementation")


def merge_heads(x):
    raise ValueError("not an implementation")
