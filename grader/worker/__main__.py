"""The sandboxed worker: `python -I -m grader.worker --control-fd N --request-fd M`.

One worker per submission imports torch once, then forks a child per exercise (and one per isolated
probe). Children run the student's code under rlimits; the parent never does. The parent drains each
child's output, enforces the wall clock, cleans up whatever the child left running, and reports each
exercise's fate as a JSON line on the control descriptor, which children do not hold.

Theory of operation, observations. In a child, student code shares the address space of the probes, so it can do
whatever grader code there does. It cannot reach this process, which never runs student code; so here:

- The parent drives each child one step at a time (the import's observation, then each probe of its group): when
  the child asks, it sends the step's probe, its seed and a fresh random token on the child's step pipe, and reads
  the answer on the child's result pipe: `result <token> <sizes>` and the observation's bytes
  (grader/worker/protocol.py). The child asks right before it reads, so no step waits in the pipe while student
  code runs.
- An answer counts for the step whose token it carries, once. A token exists only from its step's start, so
  nothing student code wrote before can claim that step; a second answer with a token spoils its step (neither
  is trusted); lines that are not the runner's are ignored, so writing on the pipe cannot cost a classmate nor
  the same code's other probes anything.
- The parent alone writes the observation files, into a folder no child can write (strict level: the
  supervisor's, outside the box, reached through a descriptor no child holds; basic level: the exercise's `obs`,
  root's and never lent), and reports their digests on the control pipe; the judge reads no other file.
- The forbidden-API hooks write every name they see on the result pipe as it happens (grader/worker/forbidden.py);
  the parent compares them with the exercise's forbidden list, which it holds, and reports the forbidden ones.

What stays possible, in one address space (README, out of scope): code that impersonates the runner while a
probe runs (reads that step's token from the runner's frame or its pipe, answers for it, and ends the process
before the runner answers) decides that one probe's observation. It can write no file, no acknowledgement, no
other step's observation, and cannot take back a name the hooks wrote.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import importlib
import json
import os
import secrets
import signal
import sys
import time

from grader.worker import protocol
from grader.worker.protocol import Event, Limit
from grader.worker.jail import (ExerciseBox, become_subreaper, child_limits, cleanup_strays, drop_privileges,
                               hand_over, oom_kills)

OUTPUT_TAIL_BYTES = 4096
# How often the loop driving a child looks at its clock and its memory group unwoken: the child's end, its output
# and its answers wake it at once where the child has a pidfd (TICK), and where it has none its end is polled (POLL).
TICK_SECONDS, POLL_SECONDS = 0.05, 0.02
MEMORY_WORDS = (b"MemoryError", b"std::bad_alloc", b"Cannot allocate memory", b"can't allocate memory")
_torch_threads_set = False   # start_up has set torch's threads in this process (or in the fork server it came from)


def main(argv: list[str] | None = None) -> int:
    """`argv`: the worker's arguments (default the command line's; a fork server's child passes its own)."""
    parser = argparse.ArgumentParser(prog="grader.worker")
    parser.add_argument("--control-fd", type=int, required=True)
    parser.add_argument("--request-fd", type=int, required=True)
    args = parser.parse_args(argv)
    requests = os.fdopen(args.request_fd, encoding="utf-8")
    # Two lines: the sandbox's own (jail, modules to import), then the submission's exercises. A pre-started sandbox
    # gets the second only once its submission is known, and waits for it below, warm. Neither holds the course's
    # seed (each probe's own seed comes with its exercise) nor any probe code (each child loads its exercise's).
    setup = json.loads(requests.readline())
    control = os.fdopen(args.control_fd, "w", buffering=1, encoding="utf-8")
    jail = setup["jail"]
    if not jail.get("kill_all"):
        become_subreaper()

    send(control, {"event": Event.READY, "torch": start_up(setup["preload"])})
    line = requests.readline()
    requests.close()
    if not line:
        return 0  # a pre-started sandbox that no submission needed
    request = json.loads(line)
    if any("::" in name for job in request["exercises"] for name in job.get("forbidden", [])):
        # A dispatch mode's first use imports torch._dynamo (torch._compile's decorator), 1 to 4 s: once here, before
        # any exercise's clock starts, rather than in the child of every exercise whose operators are watched.
        importlib.import_module("torch._dynamo")
        gc.freeze()
    for job in request["exercises"]:
        send(control, {"event": Event.START, "id": job["id"]})
        started = time.monotonic()
        result = {"event": Event.DONE, "id": job["id"], "exit": None, "signal": None, "limit": None,
                  "output_tail": "", "output_bytes": 0, "max_rss_mb": 0.0, "cpu_s": 0.0, "grader_fault": ""}
        tail = bytearray()
        try:
            if jail.get("box"):
                with ExerciseBox(job, jail) as box:
                    run_exercise(job, jail, result, tail, control, started)
                    if result["limit"] is None and box.disk_full():
                        result["limit"] = Limit.DISK
            else:
                hand_over(job["workdir"], jail, to_user=True)
                run_exercise(job, jail, result, tail, control, started)
                hand_over(job["workdir"], jail, to_user=False)
        except OSError as exc:  # the sandbox itself failed (a mount, a fork, a write): never the student's fault
            result["grader_fault"] = result["grader_fault"] or f"the sandbox failed: {exc}"
        result["wall_s"] = round(time.monotonic() - started, 3)
        result["cpu_s"] = round(result["cpu_s"], 3)
        result["output_tail"] = bytes(tail[-OUTPUT_TAIL_BYTES:]).decode("utf-8", "replace")
        send(control, result)
    send(control, {"event": Event.FINISHED})
    return 0


def start_up(preload: list[str]) -> str:
    """Import torch once, with one thread, and what the probe code imports (`preload`); return torch's version.
    A fork server (grader/worker/spawn.py) calls it before it forks: its children find all of it imported, and only
    the modules of `preload` it lacked are imported here."""
    global _torch_threads_set
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch  # noqa: F401 - imported once here, inherited by every forked child

    if not _torch_threads_set:   # torch allows setting the inter-op threads once per process
        torch.set_num_threads(1)
        torch.set_num_interop_threads(1)
        _torch_threads_set = True

    import grader.probes  # noqa: F401 - the package each child's probe code goes into (root's alone at Gradescope)
    import grader.worker.runner  # noqa: F401 - the children's code
    for module in preload:
        # What the probe code imports (torch._dynamo, which the first optimizer needs) is paid here, once, before
        # any exercise's clock starts, instead of in every forked child; the probe modules themselves are not.
        try:
            importlib.import_module(module)
        except ImportError:
            pass   # a child that needs it fails on it, as the grader's fault

    # Every object so far (torch, the probes) lives as long as the worker: frozen, the collector never walks
    # them in a forked child, where walking writes to each one's header and copies every page it touches.
    gc.freeze()
    return torch.__version__


def run_exercise(job: dict, jail: dict, result: dict, tail: bytearray, control, started: float) -> None:
    """Run the exercise's probe groups, a child each, until one ends abnormally; fill `result`."""
    deadline = started + job["timeout_s"]
    files = ObservationFiles(job, jail)
    for index, group in enumerate(job["groups"]):
        steps = [protocol.IMPORT_PROBE, *group] if index == 0 else list(group)
        run = run_child(job, steps, jail, deadline, tail, control, files, first=index == 0)
        send(control, {"event": Event.ACKS, "id": job["id"], "acks": files.acks, "forbidden": sorted(files.forbidden)})
        result["output_bytes"] += run["output_bytes"]
        result["max_rss_mb"] = max(result["max_rss_mb"], run["max_rss_mb"])
        result["cpu_s"] += run["cpu_s"]
        result["exit"], result["signal"], result["limit"] = run["exit"], run["signal"], run["limit"]
        result["grader_fault"] = run["grader_fault"]
        if run["limit"] or run["signal"] is not None or run["exit"] not in (0, None):
            break


def send(control, message: dict) -> None:
    control.write(json.dumps(message) + "\n")


def run_child(job: dict, steps: list[str], jail: dict, deadline: float, tail: bytearray, control,
              files: ObservationFiles, first: bool = True) -> dict:
    """Fork one child for a group of probes, drive it step by step to its end, and say how it ended."""
    read_end, write_end = os.pipe()        # the child's output
    step_read, first_write = os.pipe()     # this process -> the child: the steps
    step_write: int | None = first_write
    result_read, result_write = os.pipe()  # the child -> this process: what it answers, what its hooks see
    worker = os.getpid()
    kills = oom_kills(jail)
    try:
        pid = os.fork()
    except OSError:
        for fd in (read_end, write_end, step_read, first_write, result_read, result_write):
            os.close(fd)
        raise
    if pid == 0:  # the child: student code runs from here on
        try:
            os.close(control.fileno())  # the control pipe is the parent's word alone
            for fd in (read_end, first_write, result_read):
                os.close(fd)
            from grader.worker.runner import Channel, load_probe_code, read_probe_code, run_probes

            os.dup2(write_end, 1)   # first: what fails below is said in the exercise's output
            os.dup2(write_end, 2)
            os.close(write_end)
            code = read_probe_code(job, jail)   # root's files: read before the privileges go
            from grader.models.handles import attach

            attach(job, jail)   # the exercise's model process, reached through the supervisor's folder (root's)
            if jail.get("scratch_fd") is not None:
                os.close(jail["scratch_fd"])  # the supervisor's folder is the worker's alone
            os.setpgid(0, 0)
            child_limits(job, jail)
            drop_privileges(jail, worker)
            probes_module = load_probe_code(code)
            del code
            run_probes(job, Channel(step_read, result_write), probes_module, write_import=first)
            try:  # os._exit skips it, and what the student printed belongs in the output tail
                sys.stdout.flush()
                sys.stderr.flush()
            except BaseException:  # noqa: BLE001 - a replaced sys.stdout is the student's loss, not a crash
                pass
        except BaseException:  # noqa: BLE001 - whatever happens, the child must not return into the parent's loop
            try:
                import traceback

                traceback.print_exc()  # into the output tail: a grader fault, or a submission that broke the runner
            finally:
                os._exit(3)
        os._exit(0)

    send(control, {"event": Event.CHILD, "pid": pid})
    for fd in (write_end, step_read, result_write):
        os.close(fd)
    os.set_blocking(read_end, False)
    os.set_blocking(result_read, False)
    results = Results(steps, job["seeds"], set(job.get("forbidden", [])), files)
    limit = None
    output_bytes = 0
    cap = job["output_kb"] * 1024
    status = rusage = None
    # The child's end wakes the loop at once (its pidfd becomes readable), not at the next tick; the tick is left
    # for the clock and the memory group's kill count. A pipe at its end is watched no more: select would
    # find it readable at every call, and the loop would spin while the child runs on.
    ended = _pidfd(pid)
    watched = [fd for fd in (read_end, result_read, ended) if fd is not None]
    tick = TICK_SECONDS if ended is not None else POLL_SECONDS
    try:
        while True:
            output_bytes += drain(read_end, tail, watched)
            if drain_results(result_read, results, watched=watched):
                step_write = ask(results, step_write)
            if output_bytes > cap and limit is None:
                limit = Limit.OUTPUT
                kill_child(pid, jail)
            waited, status, rusage = os.wait4(pid, os.WNOHANG)
            if waited == pid:
                break
            if time.monotonic() > deadline and limit is None:
                limit = Limit.TIME
                kill_child(pid, jail)
            if limit is None and oom_kills(jail) > kills:   # a process of the exercise passed its memory group's limit
                limit = Limit.MEMORY
                kill_child(pid, jail)
            wait_readable(watched, max(0.0, min(tick, deadline - time.monotonic())) if limit is None else tick)
        cleanup_strays(pid, jail)  # first, so that no stray keeps writing while the pipes are drained
        output_bytes += drain(read_end, tail)
        drain_results(result_read, results)
    finally:
        left: tuple[int | None, ...] = (read_end, result_read, step_write, ended)
        for end in left:
            if end is not None:
                os.close(end)

    exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    if limit is None and sig == signal.SIGXCPU:
        limit = Limit.CPU
    if limit is None and sig == signal.SIGXFSZ:
        limit = Limit.FILE_SIZE
    if limit is None and (sig is not None or exit_code not in (0, None)) and (
            oom_kills(jail) > kills or any(m in tail for m in MEMORY_WORDS)):
        limit = Limit.MEMORY  # the memory group's limit killed it, or an allocation failed in C (abort) and it said so
    fault = ""
    if not results.started and (sig is not None or exit_code not in (0, None)):
        # Before the runner announced the student's import nothing of the student's had run: the grader's fault.
        fault = (f"the grading process ended ({f'signal {sig}' if sig is not None else f'exit status {exit_code}'}) "
                 "before the student's code was imported")
    return {"exit": exit_code, "signal": sig, "limit": limit, "output_bytes": output_bytes, "grader_fault": fault,
            "max_rss_mb": round(rusage.ru_maxrss / 1024, 1),
            "cpu_s": rusage.ru_utime + rusage.ru_stime}


def ask(results: Results, step_write: int | None) -> int | None:
    """Send the child its next step when it asked for one and the last one is answered; close the pipe when it asks
    and none is left (the child then reads its end). Returns the pipe, or None once closed."""
    if step_write is None or not results.wants or results.waiting is not None:
        return step_write
    line = results.next_request()
    if line is None:
        os.close(step_write)
        return None
    try:
        os.write(step_write, line)
    except BrokenPipeError:
        pass   # the child is gone: its wait says how
    return step_write


def _pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when the child `pid` ends; None where the system has none (the loop then
    polls its wait at POLL_SECONDS)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def drain_results(fd: int, results: Results, most: int = 16, watched: list[int] | None = None) -> bool:
    """Feed what is waiting on the result pipe to `results`, at most `most` MiB (a child that never stops writing
    must not keep the loop from its clock); whether anything came. At the pipe's end it leaves `watched`."""
    came = False
    for _ in range(most):
        try:
            chunk = os.read(fd, 1 << 20)
        except BlockingIOError:
            return came
        if not chunk:
            _unwatch(fd, watched)
            return came
        came = True
        results.feed(chunk)
    return came


class ObservationFiles:
    """An exercise's observation files, written by this process alone, and their digests (`acks`, which the judge
    checks every file against) and the forbidden APIs its children's hooks reported (`forbidden`)."""

    def __init__(self, job: dict, jail: dict):
        self.folder, self.dir_fd = job["obs_dir"], jail.get("scratch_fd")   # relative to the supervisor's at strict
        self.acks: dict[str, list | None] = {}
        self.forbidden: set[str] = set()

    def write(self, name: str, text: bytes, tensors: bytes | None) -> None:
        """`tensors` None: the probe recorded none, or more than the protocol allows (the judge then says so)."""
        # Opened for each write, never held: a child forked meanwhile inherits no descriptor of this folder.
        folder = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=self.dir_fd)
        try:
            if tensors is not None:
                protocol.write_new(name + protocol.TENSOR_SUFFIX, tensors, dir_fd=folder)
            # last: its presence means the probe finished
            protocol.write_new(name + protocol.JSON_SUFFIX, text, dir_fd=folder)
        finally:
            os.close(folder)
        self.acks[name] = [hashlib.sha256(text).hexdigest(),
                           hashlib.sha256(tensors).hexdigest() if tensors is not None else None]

    def spoil(self, name: str) -> None:
        self.acks[name] = None   # answered twice: neither answer is trusted


class Results:
    """What one child says on its result pipe, parsed as it comes, and the steps it is asked for.

    Lines are `started`, `next`, `op <name>`, `call <name>` and `result <token> <json bytes> <tensor bytes>`, the last
    followed by exactly those bytes; any other line is not the runner's and is ignored (see the module's docstring
    for what an answer must carry to count)."""

    def __init__(self, steps: list[str], seeds: dict[str, int], forbidden: set[str], files: ObservationFiles):
        self.steps, self.seeds, self.forbidden_names, self.files = list(steps), seeds, forbidden, files
        self.asked: dict[str, str] = {}    # token -> its step
        self.answered: set[str] = set()
        self.waiting: str | None = None    # the token of the step asked for and not answered yet
        self.buffer = bytearray()
        # an announced answer whose bytes are still coming: its token, and for its JSON then its tensors, the bytes
        # still to come and what is kept of them (None: larger than the protocol allows, so dropped as they come)
        self.body: tuple[str, list[list]] | None = None
        self.skipping = False              # inside a line too long to be the runner's
        self.started = False               # the runner announced the student's import (protocol.STARTED)
        self.wants = False                 # the child asked for a step (protocol.NEXT)

    def next_request(self) -> bytes | None:
        """The line that starts the next step, with a token of its own; None when no step is left."""
        self.wants = False
        if not self.steps:
            return None
        name = self.steps.pop(0)
        token = secrets.token_hex(16)
        self.asked[token], self.waiting = name, token
        return f"{token} {name} {self.seeds.get(name, 0)}\n".encode("ascii")

    def feed(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        while buffer:
            if self.body is not None:
                if not self._take_body():
                    return
                continue
            end = buffer.find(b"\n")
            if end < 0:
                if len(buffer) > protocol.MAX_LINE:
                    buffer.clear()
                    self.skipping = True
                return
            line = bytes(buffer[:end])
            del buffer[:end + 1]
            if self.skipping:
                self.skipping = False   # the rest of a line too long to be the runner's
            elif len(line) <= protocol.MAX_LINE:
                self._line(line)

    def _line(self, line: bytes) -> None:
        if line == protocol.NEXT:
            self.wants = True
        elif line == protocol.STARTED:
            self.started = True
        elif (name := protocol.hook_name(line)) is not None:
            if name in self.forbidden_names:
                self.files.forbidden.add(name)
        elif line.startswith(protocol.RESULT):
            parts = line[len(protocol.RESULT):].split(b" ")
            if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
                n_text, n_tensors = int(parts[1]), int(parts[2])
                keep_text = n_text <= protocol.MAX_JSON_BYTES
                keep_tensors = keep_text and n_tensors <= protocol.MAX_TENSOR_BYTES
                self.body = (parts[0].decode("ascii", "replace"),
                             [[n_text, bytearray() if keep_text else None],
                              [n_tensors, bytearray() if keep_tensors and n_tensors else None]])

    def _take_body(self) -> bool:
        """Take what has come of the announced answer; True once all of it has."""
        assert self.body is not None   # called only once a result line has announced one
        token, parts = self.body
        buffer = self.buffer
        for part in parts:
            if part[0]:
                taken = buffer[:part[0]]
                del buffer[:len(taken)]
                part[0] -= len(taken)
                if part[1] is not None:
                    part[1] += taken
                if part[0]:
                    return False
        self.body = None
        (_, text), (_, tensors) = parts
        self._answer(token, None if text is None else bytes(text), None if tensors is None else bytes(tensors))
        return True

    def _answer(self, token: str, text: bytes | None, tensors: bytes | None) -> None:
        """The answer for the step of `token`; `text` None: its JSON is larger than allowed, so it is not written."""
        name = self.asked.get(token)
        if name is None:
            return   # no step was asked for with this token
        if token in self.answered:
            self.files.spoil(name)
            return
        self.answered.add(token)
        if token == self.waiting:
            self.waiting = None
        if text is not None:
            self.files.write(name, text, tensors)


def _unwatch(fd: int, watched: list[int] | None) -> None:
    if watched is not None and fd in watched:
        watched.remove(fd)


def drain(fd: int, tail: bytearray, watched: list[int] | None = None) -> int:
    """Read what is waiting on fd, keep the last few kilobytes, return how many bytes came; at the pipe's end
    (every writer gone) it leaves `watched`."""
    total = 0
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return total
        if not chunk:
            _unwatch(fd, watched)
            return total
        total += len(chunk)
        tail.extend(chunk)
        if len(tail) > 2 * OUTPUT_TAIL_BYTES:
            del tail[: len(tail) - OUTPUT_TAIL_BYTES]


def wait_readable(fds: list[int], seconds: float) -> None:
    import select

    if fds:
        select.select(fds, [], [], seconds)
    else:
        time.sleep(seconds)


def kill_child(pid: int, jail: dict) -> None:
    """SIGKILL the child's group (and, in a pid namespace, everything else) without reaping anything.

    The child is reaped by run_child's own wait4, which needs its status; cleanup_strays reaps with
    waitpid(-1) and, called here, used to take the child's status away (wait4 then raised
    ChildProcessError and the whole worker died, so a plain timeout was reported as a crash).
    """
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if jail.get("kill_all"):
        try:
            os.kill(-1, signal.SIGKILL)  # strays that left the group (setsid); run_child cleans up after the wait
        except ProcessLookupError:
            pass


if __name__ == "__main__":
    sys.exit(main())
