"""What judging one submission may take, and the sentences that say when it took more.

The judge never runs student code, but it computes with what student code returned: a tensor larger than asked
for, a record of thousands of entries. Each submission is therefore judged in a process of its own
(`grader/judge/server.py`) under these limits, so that what one submission's data costs falls on that
submission alone. Memory is capped by what is used (RLIMIT_DATA: the heap and private mappings), never by
address space: the CUDA build of torch reserves several GB of address space when imported.
"""

from __future__ import annotations

import os
import signal
from dataclasses import asdict, dataclass
from enum import StrEnum

from grader.i18n import Text, t


@dataclass(frozen=True)
class JudgeLimits:
    """course.toml's `[judge]` table sets any of these."""

    memory_mb: int = 1024          # allocated beyond the judging server's own memory; the largest record is 64 MiB
    criterion_cpu_s: float = 10.0  # CPU of one criterion (the slowest on a correct submission takes 0.05 s)
    cpu_s: int = 120               # CPU of one submission's judging as a whole: the process is killed past it
    wall_s: float = 900.0          # a judging still running after this long is killed (a stall: CPU limits decide)

    def to_dict(self) -> dict:
        return asdict(self)


class JudgeLimit(StrEnum):
    """The judge's limit a submission's judging reached (`LimitExceeded.limit`, the evidence's `judge_limit`)."""

    MEMORY = "memory"                 # JudgeLimits.memory_mb
    CRITERION_CPU = "criterion_cpu"   # JudgeLimits.criterion_cpu_s
    CPU = "cpu"                       # JudgeLimits.cpu_s
    WALL = "wall"                     # JudgeLimits.wall_s


class LimitExceeded(BaseException):
    """A judge's limit was reached while a criterion ran. A BaseException, so that no `except Exception` in a
    criterion can take it for an answer of its own."""

    def __init__(self, limit: JudgeLimit):
        super().__init__(limit)
        self.limit = limit


def exceeded_message(limit: JudgeLimit, limits: JudgeLimits | None) -> Text:
    """The submission's error when judging its observations took more than `limit` allows."""
    limits = limits or JudgeLimits()
    why = t("your code returned far more than the exercise asks for")
    if limit == JudgeLimit.MEMORY:
        return t("judging your observations exceeded the judge's memory limit of {mb} MB: {why}", mb=limits.memory_mb,
                 why=why)
    if limit == JudgeLimit.CRITERION_CPU:
        return t("judging your observations exceeded the judge's limit of {seconds:g} s of CPU time for one "
                 "criterion: {why}", seconds=limits.criterion_cpu_s, why=why)
    if limit == JudgeLimit.CPU:
        return t("judging your observations exceeded the judge's limit of {seconds:g} s of CPU time for one "
                 "submission: {why}", seconds=limits.cpu_s, why=why)
    return t("judging your observations exceeded the judge's limit of {seconds:g} s: {why}", seconds=limits.wall_s,
             why=why)


def _data_in_use() -> int:
    """Bytes of this process's data segment and private writable mappings (what RLIMIT_DATA counts), read afresh
    each call (what the last tensor loaded took counts for the next) from a descriptor this process opened once:
    a judging checks before each of some eighty tensor files, and an open, a close and a line-by-line parse each
    time cost more than the read."""
    global _status
    pid = os.getpid()
    if _status is None or _status[0] != pid:   # /proc/self is the opener's: a forked child opens its own
        _status = (pid, os.open("/proc/self/status", os.O_RDONLY | os.O_CLOEXEC))
    text = os.pread(_status[1], 1 << 16, 0)
    start = text.find(b"\nVmData:")
    if start < 0:
        return 0
    return int(text[start + 8:text.index(b"\n", start + 8)].split()[0]) * 1024


_status: tuple[int, int] | None = None   # (the process, its /proc/self/status descriptor)


def ensure_room(nbytes: int) -> None:
    """Raise MemoryError now, before anything is allocated, when `nbytes` more would pass this process's memory
    limit (RLIMIT_DATA): some allocators (safetensors' own, in Rust) cannot fail cleanly later."""
    try:
        import resource
    except ImportError:   # no such limit here
        return
    soft, _ = resource.getrlimit(resource.RLIMIT_DATA)
    if soft != resource.RLIM_INFINITY and _data_in_use() + nbytes > soft:
        raise MemoryError(f"{nbytes} more bytes would pass the memory limit")


def apply(limits: JudgeLimits) -> None:
    """Limit this (freshly forked, single-threaded) process: `memory_mb` more than it holds now, `cpu_s` of CPU in
    all (killed past it), and SIGPROF armed per criterion by `criterion_timer`."""
    import resource   # POSIX only: this runs in the judging server's children alone

    memory = _data_in_use() + (limits.memory_mb << 20)
    resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGPROF, _criterion_cpu_spent)


def _criterion_cpu_spent(signum, frame) -> None:
    # Python runs a handler at its next check after the signal, not at the signal: one that fires just before the
    # timer is disarmed can run after the criterion ended, in the judge's own code, where it must not raise.
    if _timing:
        raise LimitExceeded(JudgeLimit.CRITERION_CPU)


_timing = False   # a criterion_timer is running


class criterion_timer:
    """`with criterion_timer(limits):` around one criterion: LimitExceeded("criterion_cpu") is raised in it once it
    has used `criterion_cpu_s` of CPU (ITIMER_PROF counts this process's CPU, not the wall clock)."""

    def __init__(self, limits: JudgeLimits):
        self.seconds = limits.criterion_cpu_s

    def __enter__(self) -> None:
        global _timing
        _timing = True
        signal.setitimer(signal.ITIMER_PROF, self.seconds)

    def __exit__(self, *exc) -> None:
        global _timing
        try:
            signal.setitimer(signal.ITIMER_PROF, 0)   # a signal already pending is handled here, as the limit
        finally:
            _timing = False
