"""A submission that leaves a mark (`MARK`, filled in by the test) everywhere it can, for the next submission to look
for (tests/isolation/mark_seeker.py): a file in every folder it can write, its environment, every module it has
imported and the builtins, a POSIX shared-memory object, an abstract socket and a process that outlives it holding
both. It prints `PLANTED <n>`, the number of places it wrote, the proof that it ran. Then its functions raise."""

import builtins
import os
import socket
import sys
import time

MARK = "@MARK@"
planted = 0
FOLDERS = ("/tmp", "/dev/shm", ".", "..", os.path.expanduser("~"), "/", "/etc", "/opt", "/opt/grader",
           "/opt/grader/lib", "/opt/grader/lib/grader", "/opt/grader/lib/grader/worker", "/submission", "/.scratch",
           "/dev", "/var/tmp")
for folder in FOLDERS:
    try:
        with open(os.path.join(folder, MARK + ".txt"), "w") as fh:
            fh.write(MARK)
        planted += 1
    except OSError:
        pass
os.environ[MARK] = MARK
setattr(builtins, MARK, MARK)
for module in list(sys.modules.values()):
    try:
        setattr(module, MARK, MARK)
        planted += 1
    except (AttributeError, TypeError):
        pass
try:
    fd = os.open("/dev/shm/" + MARK, os.O_CREAT | os.O_RDWR, 0o666)
    os.write(fd, MARK.encode())
    planted += 1
except OSError:
    pass
listener = socket.socket(socket.AF_UNIX)
listener.bind("\0" + MARK)
listener.listen()
planted += 1
if os.fork() == 0:   # outlives the exercise if nothing kills it, holding the socket
    os.setsid()
    time.sleep(600)
    os._exit(0)
print("PLANTED", planted, flush=True)


def split_heads(x, n_heads):
    raise ValueError("not an implementation")


def merge_heads(x):
    raise ValueError("not an implementation")
