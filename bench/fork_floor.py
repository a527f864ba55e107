"""The floor with a fresh process per exercise: every probe of every exercise called on the reference solutions,
each exercise in a child forked from one process that imported torch and the probe modules (and froze them, as
the worker does), with no sandbox, judge or observation files. What the worker's isolation costs beyond this is
the sandbox's; what this costs beyond bench/floor.py is the fork per exercise's. Prints JSON: seconds per
exercise (fork to reaped) and in all."""

import gc
import importlib
import importlib.util
import json
import os
import sys
import tempfile
import time

start = time.perf_counter()
os.environ["OMP_NUM_THREADS"] = "1"
import torch  # noqa: E402

torch.set_num_threads(1)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from grader.course import load_course  # noqa: E402
from grader.worker.probe import ProbeContext, probes_of  # noqa: E402
from grader.worker.runner import probe_seed  # noqa: E402

course = load_course()
for ex in course.exercises:
    importlib.import_module(ex.probes_module)
gc.freeze()
import_s = time.perf_counter() - start


def run_exercise(ex) -> None:
    path = str(course.solution(ex))
    spec = importlib.util.spec_from_file_location(ex.module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[ex.module_name] = module
    spec.loader.exec_module(module)
    with tempfile.TemporaryDirectory() as workdir:
        for p in probes_of(importlib.import_module(ex.probes_module)):
            seed = probe_seed(course.seed, ex.id, p.name)
            torch.manual_seed(seed)
            p.fn(module, ProbeContext(p.name, seed, workdir, path))


per_exercise = {}
for ex in course.exercises:
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        try:
            run_exercise(ex)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    per_exercise[ex.id] = {"wall_s": time.perf_counter() - t0}
print(json.dumps({"import_s": import_s, "exercises": per_exercise,
                  "exercises_s": sum(e["wall_s"] for e in per_exercise.values()),
                  "total_s": time.perf_counter() - start}))
sys.stdout.flush()
os._exit(0)
