"""The floor with a fresh process per exercise: every probe of every exercise called on the reference solutions,
each exercise in a child forked from one process that imported torch and the probe modules (and froze them, as
the worker does), with no sandbox, judge or observation files. What the worker's isolation costs beyond this is
the sandbox's; what this costs beyond bench/floor.py is the fork per exercise's (the penalty of a cold process).

`python bench/fork_floor.py [--repeat N]`: the exercise loop N times (default 1), forked, then N times in this
process once it has run every probe (warm, as bench/floor.py's last pass). Prints JSON: per exercise, the child's
CPU (`cpu_s`, the least of the N) and the same exercise's CPU in this process warm (`warm_cpu_s`, the least of the
N); their sums, and the fork penalty (`penalty`: forked over warm). The seeds are derived here, before any fork,
as the supervisor derives them outside the worker: a child never pays the seed's key stretching (scrypt, tens of
milliseconds), which no exercise's child of the worker does either."""

import time

START = time.perf_counter()

import gc  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

from floor import PROBES_FILE, import_course_module, load_course, probe_seed, run_exercise  # noqa: E402 - bench/ is this script's folder, first on sys.path


def forked(course, ex) -> tuple[float, float]:
    """(wall from fork to reaped, the child's CPU) of one exercise run in a forked child."""
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        try:
            run_exercise(course, ex)
        finally:
            os._exit(0)
    _, _, usage = os.wait4(pid, 0)
    return time.perf_counter() - t0, usage.ru_utime + usage.ru_stime


def main() -> None:
    repeat = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 1
    course = load_course()
    for ex in course.exercises:
        import_course_module(course, ex.id, PROBES_FILE)
    probe_seed(course.seed, "", "")   # the key stretched once, here: every child inherits it
    gc.freeze()
    import_s = time.perf_counter() - START
    per_exercise: dict[str, dict[str, float]] = {}
    for _ in range(repeat):
        for ex in course.exercises:
            wall, cpu = forked(course, ex)
            seen = per_exercise.setdefault(ex.id, {"wall_s": wall, "cpu_s": cpu})
            seen["wall_s"], seen["cpu_s"] = min(seen["wall_s"], wall), min(seen["cpu_s"], cpu)
    for ex in course.exercises:   # once unmeasured: the warm figures are of a process that has run every probe
        run_exercise(course, ex)
    for _ in range(repeat):
        for ex in course.exercises:
            c0 = time.process_time()
            run_exercise(course, ex)
            cpu = time.process_time() - c0
            seen = per_exercise[ex.id]
            seen["warm_cpu_s"] = min(seen.get("warm_cpu_s", cpu), cpu)
    forked_cpu = sum(e["cpu_s"] for e in per_exercise.values())
    warm_cpu = sum(e["warm_cpu_s"] for e in per_exercise.values())
    print(json.dumps({"import_s": import_s, "repeat": repeat, "exercises": per_exercise,
                      "exercises_s": sum(e["wall_s"] for e in per_exercise.values()),
                      "exercises_cpu_s": forked_cpu, "warm_cpu_s": warm_cpu, "penalty": forked_cpu / warm_cpu,
                      "total_s": time.perf_counter() - START}))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
