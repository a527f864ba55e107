"""The floor with a fresh process per exercise: every probe of every exercise called on the reference solutions,
each exercise in a child forked from one process that imported torch and the probe modules (and froze them, as
the worker does), with no sandbox, judge or observation files. What the worker's isolation costs beyond this is
the sandbox's; what this costs beyond bench/floor.py is the fork per exercise's. Prints JSON: seconds per
exercise (fork to reaped, and the child's CPU) and in all."""

import time

START = time.perf_counter()

import gc  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

from floor import load_course, run_exercise  # noqa: E402 - bench/ is this script's folder, first on sys.path


def main() -> None:
    course = load_course()
    for ex in course.exercises:
        importlib.import_module(ex.probes_module)
    gc.freeze()
    import_s = time.perf_counter() - START
    per_exercise = {}
    for ex in course.exercises:
        t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            try:
                run_exercise(course, ex)
            finally:
                os._exit(0)
        _, _, usage = os.wait4(pid, 0)
        per_exercise[ex.id] = {"wall_s": time.perf_counter() - t0, "cpu_s": usage.ru_utime + usage.ru_stime}
    print(json.dumps({"import_s": import_s, "exercises": per_exercise,
                      "exercises_s": sum(e["wall_s"] for e in per_exercise.values()),
                      "exercises_cpu_s": sum(e["cpu_s"] for e in per_exercise.values()),
                      "total_s": time.perf_counter() - START}))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
