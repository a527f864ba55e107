"""The bare floor: every probe of every exercise called on the reference solutions in one plain process,
no sandbox, no judge, no observation files. Prints JSON: seconds per exercise and in all.

`python bench/floor.py [--passes N]`: the exercise loop N times (default 1) in the same process; `passes` lists
each pass's seconds. The last of several passes is the probes' own compute with everything imported and warm
(the first pays torch's first-use costs: lazy imports, caches, specialised bytecode).
"""

import importlib.util
import json
import os
import resource
import sys
import tempfile
import time

START = time.perf_counter()
os.environ["OMP_NUM_THREADS"] = "1"
import torch  # noqa: E402

torch.set_num_threads(1)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from grader.course import PROBES_FILE, import_course_module, load_course  # noqa: E402
from grader.worker.probe import ProbeContext, probes_of  # noqa: E402
from grader.worker.seeds import probe_seed  # noqa: E402

IMPORT_S = time.perf_counter() - START


def run_exercise(course, ex) -> None:
    """Import the exercise's reference solution and call each of its probes on it, seeded as the worker seeds."""
    path = str(course.solution(ex))
    spec = importlib.util.spec_from_file_location(ex.module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[ex.module_name] = module
    spec.loader.exec_module(module)
    with tempfile.TemporaryDirectory() as workdir:
        for p in probes_of(import_course_module(course, ex.id, PROBES_FILE)):
            seed = probe_seed(course.seed, ex.id, p.name)
            torch.manual_seed(seed)
            p.fn(module, ProbeContext(p.name, seed, workdir, path))


def main() -> None:
    passes = int(sys.argv[sys.argv.index("--passes") + 1]) if "--passes" in sys.argv else 1
    course = load_course()
    per_exercise = {}
    walls = []
    for _ in range(passes):   # per_exercise: the first pass's, as a lone grading's fresh sandbox would see it
        t_pass = time.perf_counter()
        for ex in course.exercises:
            t0, c0 = time.perf_counter(), time.process_time()
            run_exercise(course, ex)
            per_exercise.setdefault(ex.id, {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0})
        walls.append(time.perf_counter() - t_pass)
    print(json.dumps({"import_torch_s": IMPORT_S, "exercises": per_exercise, "total_s": time.perf_counter() - START,
                      "passes": walls, "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
    # The grader skips the interpreter's teardown once its work is done (grader.cli.run): so does the floor, so
    # that neither figure holds half a second of freeing modules.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
