"""The checker a handout ships in `checker/`: the grader with only the criteria marked visible in course.toml.

What it holds and why nothing in it is secret:
- the criteria modules cut down to the visible criteria and the helpers they use (no hidden criterion, no
  hidden helper), and the probe modules cut down to the probes those criteria read, in checks/<exercise>/ (the
  checker course's solutions folder, which holds no solution);
- a course.toml with the visible criteria's points only and a public seed, never the course's seed, so the
  inputs a student's code meets here are not the hidden ones;
- reference observations only where a visible criterion reads one (the inputs a probe recorded, such as the ids
  it looked up): computed on the solution with the public seed and cut down to the keys that criterion reads.
  Visible criteria otherwise judge the student's own observations, so the checker needs no solutions/.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import re
import shutil
import tomllib
from pathlib import Path

import grader
from grader.course import CRITERIA_FILE, LIB, PROBES_FILE, TOOL_ROOT, Course, ExerciseConfig, import_course_module
from grader.feedback import VISIBLE
from grader.i18n import LANGS, update_catalogs

PUBLIC_SEED = 1          # the checker's inputs; the course's seed (hidden inputs) is never written
CHECKER_DIR = "checker"
REFERENCES_DIR = "references"
# The checker course's grader-side folder (its `[course] solutions`): the cut criteria and probes, no solution
CHECKS_DIR = "checks"
# What never leaves the instructor's side.
INSTRUCTOR_ONLY = ("authoring", "batch", "classroom", "review", "review_app", "policy.py")   # rooms, and a module
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc")
# Requirements of the grader the checker never imports (grading a class on a cluster, similar submissions, the
# Canvas push, the review pages): not installed for students
INSTRUCTOR_REQUIREMENTS = ("distributed", "copydetect", "canvasapi", "starlette", "uvicorn", "python-multipart",
                           "markdown-it-py", "nh3")


class CheckerError(Exception):
    """The checker cannot be cut from this course as it is; the message says what to change."""


def visible_tests(course: Course, ex: ExerciseConfig) -> dict[str, object]:
    """The visible criteria of an exercise: test function name -> function (its metadata in `.criterion`). Visible as
    the feedback policy says (grader.feedback): one `visible` names that no `visibility` entry holds back."""
    module = import_course_module(course, ex.id, CRITERIA_FILE)
    return {name: fn for name, fn in vars(module).items()
            if name.startswith("test_") and hasattr(fn, "criterion")
            and ex.gradescope_visibility(fn.criterion.id, fn.criterion.kind) == VISIBLE}


def _defined(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return {n.id for t in targets if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)}


def _used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def cut_module(source: str, keep: set[str], docstring: str) -> str:
    """`source` with only its imports and the top-level definitions `keep` needs, transitively; the original
    text of each kept definition (comments inside it included), under a new module docstring."""
    tree = ast.parse(source)
    lines = source.splitlines()
    body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    needed = set(keep)
    kept: list[ast.stmt] = []
    changed = True
    while changed:
        changed = False
        for node in body:
            if node in kept:
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)) or _defined(node) & needed:
                kept.append(node)
                needed |= _used(node)
                changed = True
    missing = set(keep) - {name for n in kept for name in _defined(n)}
    if missing:
        raise CheckerError(f"no top-level definition of {sorted(missing)}")
    parts = [f'"""{docstring}"""']
    for node in sorted(kept, key=lambda n: n.lineno):
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        parts.append("\n".join(lines[start - 1:node.end_lineno]))
    return "\n\n\n".join(parts) + "\n"


def drop_requirements(source: str, keep: set[str]) -> str:
    """`source` with every criterion's `requires=(...)` cut to the ids in `keep`: a visible criterion that
    requires a hidden one is judged on its own in the checker, which has no hidden criterion to wait for."""
    tree = ast.parse(source)
    offsets = [0]
    for line in source.splitlines(keepends=True):
        offsets.append(offsets[-1] + len(line))
    edits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "requires" and isinstance(node.value, ast.Tuple):
            ids = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
            v = node.value
            edits.append((offsets[v.lineno - 1] + v.col_offset, offsets[v.end_lineno - 1] + v.end_col_offset,
                          repr(tuple(i for i in ids if i in keep))))
    for start, end, text in sorted(edits, reverse=True):
        source = source[:start] + text + source[end:]
    return source


def probes_read(source: str) -> set[str]:
    """The probe names a (cut) criteria module reads: the literal first argument of every `.probe(...)`."""
    return {node.args[0].value for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "probe"
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)}


class _RecordingProbe:
    """A reference probe observation that remembers which keys a criterion read."""

    def __init__(self, observed, keys: set[str]):
        self._observed, self._keys = observed, keys

    def value(self, key):
        self._keys.add(key)
        return self._observed.value(key)

    def tensor(self, key):
        self._keys.add(key)
        return self._observed.tensor(key)

    def has(self, key):
        self._keys.add(key)
        return self._observed.has(key)


class _RecordingReference:
    def __init__(self, observations):
        self._observations = observations
        self.read: dict[str, set[str]] = {}

    def probe(self, name):
        return _RecordingProbe(self._observations.probe(name), self.read.setdefault(name, set()))


def reference_reads(ex: ExerciseConfig, tests: dict[str, object], reference_dir: Path) -> dict[str, set[str]]:
    """probe -> keys that the visible criteria read from the reference, found by judging the reference itself
    (every check then runs to its end, so every key a passing submission is compared with is read)."""
    from grader.grading.pipeline import probe_order
    from grader.judge.criterion import VerdictRecorder
    from grader.judge.observations import Observations, RunSummary
    from grader.judge.verdicts import Verdict

    reads: dict[str, set[str]] = {}
    for name, fn in tests.items():
        if "ref" not in inspect.signature(fn).parameters:
            continue
        observations = Observations(ex.id, ex.file, probe_order(ex), reference_dir, RunSummary())
        recording = _RecordingReference(observations)
        try:
            fn(obs=observations, ref=recording, verdict=VerdictRecorder())
        except (Verdict, AttributeError) as exc:
            raise CheckerError(f"{ex.id}.{name} does not pass on the reference, or reads it other than through "
                               f"value/tensor/has: {exc}") from None
        for probe, keys in recording.read.items():
            reads.setdefault(probe, set()).update(keys)
    return reads


def write_reference(reference_dir: Path, reads: dict[str, set[str]], target: Path) -> None:
    """The reference observations cut down to the keys read: JSON values, and tensors re-saved alone."""
    from safetensors.torch import load_file, save_file

    from grader.worker import protocol

    target.mkdir(parents=True)
    shutil.copyfile(reference_dir / (protocol.IMPORT_PROBE + protocol.JSON_SUFFIX),
                    target / (protocol.IMPORT_PROBE + protocol.JSON_SUFFIX))
    for probe, keys in sorted(reads.items()):
        raw = json.loads((reference_dir / (probe + protocol.JSON_SUFFIX)).read_text())
        tensors = [t for t in raw.get("tensors", []) if t in keys]
        cut = {"probe": probe, "status": raw["status"], "error": None,
               "values": {k: v for k, v in raw.get("values", {}).items() if k in keys},
               "not_tensors": {k: v for k, v in raw.get("not_tensors", {}).items() if k in keys},
               "tensors": tensors, "forbidden_calls": []}
        if tensors:
            stored = load_file(str(reference_dir / (probe + protocol.TENSOR_SUFFIX)))
            save_file({k: stored[k].contiguous() for k in tensors}, str(target / (probe + protocol.TENSOR_SUFFIX)))
        (target / (probe + protocol.JSON_SUFFIX)).write_text(json.dumps(cut, sort_keys=True))
    (target / "complete").write_text("")


def _toml_value(value) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(value, ensure_ascii=False)   # a JSON string is a valid TOML basic string


def checker_course_toml(course: Course, visible: dict[str, dict[str, object]]) -> str:
    lines = ["# The checker's course: the criteria `grader check` shows, with a public seed. Written by "
             "`grader handout`.",
             "[course]", f"name = {_toml_value(course.name)}", f"seed = {PUBLIC_SEED}",
             f"references = {_toml_value(REFERENCES_DIR)}", f"solutions = {_toml_value(CHECKS_DIR)}", ""]
    for ex in course.exercises:
        tests = visible[ex.id]
        lines += ["[[exercise]]", f"id = {_toml_value(ex.id)}", f"file = {_toml_value(ex.file)}",
                  f"title = {_toml_value({'en': ex.title_en, 'zh': ex.title_zh})}",
                  *(f"{name} = {value!r}" for name, value in ex.limits.to_dict().items()),
                  f"forbidden = {_toml_value(ex.forbidden)}", f"visible = {_toml_value(ex.visible)}",
                  f"hidden_criteria = {len(ex.points) - len(tests)}",
                  "[exercise.points]"]
        lines += [f"{fn.criterion.id} = {ex.points.get(fn.criterion.id, 0.0)!r}" for fn in tests.values()]
        for question in ex.questions:   # what `grader check` asks; the rubric stays the instructor's
            lines += ["[[exercise.question]]", f"id = {_toml_value(question.id)}",
                      f"points = {question.points!r}", f"prompt = {_toml_value(question.prompt)}", "rubric = []"]
        lines.append("")
    return "\n".join(lines)


def checker_pyproject(course: Course) -> str:
    main = tomllib.loads((TOOL_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    needed = [r for r in main["dependencies"]
              if re.split(r"[\s;<>=!~\[(]", r, maxsplit=1)[0] not in INSTRUCTOR_REQUIREMENTS]
    return "\n".join([
        "# The checker students install with `pip install -e ./checker` (editable: it reads its course.toml).",
        "[build-system]", 'requires = ["setuptools>=68"]', 'build-backend = "setuptools.build_meta"', "",
        "[project]", 'name = "course-checker"', f"version = {_toml_value(grader.__version__)}",
        f"requires-python = {_toml_value(main['requires-python'])}",
        f"dependencies = {_toml_value(needed)}", "",
        "[project.scripts]", 'grader = "grader.cli:main"', "",
        "[tool.setuptools.packages.find]", 'include = ["grader*"]', "",
        "[tool.setuptools.package-data]", 'grader = ["course.schema.json", "report/*.json", "judge/judge.ini"]', ""])


def write_checker(course: Course, target: Path) -> None:
    """`target` becomes an installable checker course: grader/, course.toml, exercises/ (the pristine stubs and
    public tests it checks against), checks/ (each exercise's cut criteria and probes), references/."""
    from grader.grading.pipeline import reference_folders

    package = Path(grader.__file__).resolve().parent
    shutil.copytree(package, target / "grader", ignore=shutil.ignore_patterns("__pycache__", "*.pyc", *INSTRUCTOR_ONLY))
    checks = target / CHECKS_DIR
    public = dataclasses.replace(course, seed=PUBLIC_SEED)
    if course.seed == PUBLIC_SEED:
        raise CheckerError(f"the course's seed equals the checker's public seed {PUBLIC_SEED}: choose another seed")
    visible = {}
    needed_modules: set[str] = set()
    for ex in course.exercises:
        tests = visible[ex.id] = visible_tests(course, ex)
        source = (course.solutions / ex.id / CRITERIA_FILE).read_text(encoding="utf-8")
        text = cut_module(source, set(tests) | {"EXERCISE"},
                          f"Visible criteria of exercise `{ex.id}`, as `grader handout` cut them from the course's.")
        text = drop_requirements(text, {fn.criterion.id for fn in tests.values()})
        (checks / ex.id).mkdir(parents=True)
        (checks / ex.id / CRITERIA_FILE).write_text(text, encoding="utf-8")
        wanted = probes_read(text)
        probe_source = (course.solutions / ex.id / PROBES_FILE).read_text(encoding="utf-8")
        probe_text = cut_module(probe_source, wanted, f"Probes of exercise `{ex.id}` that its visible criteria read.")
        (checks / ex.id / PROBES_FILE).write_text(probe_text, encoding="utf-8")
        for po in (course.solutions / ex.id).glob("*.po"):   # its translations, cut to the shipped code below
            shutil.copyfile(po, checks / ex.id / po.name)
        needed_modules |= {node.module.rsplit(".", 1)[1] for node in ast.walk(ast.parse(probe_text))
                           if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("grader.probes.")}
        if any("ref" in inspect.signature(fn).parameters for fn in tests.values()):
            reference_dir = reference_folders(public, [ex])[ex.id]
            write_reference(reference_dir, reference_reads(ex, tests, reference_dir), target / REFERENCES_DIR / ex.id)
        (target / "exercises" / ex.id).mkdir(parents=True)
        for source in [course.stub(ex), *sorted((course.root / "exercises" / ex.id).glob("test_*.py"))]:
            shutil.copyfile(source, target / "exercises" / ex.id / source.name)
    if needed_modules:
        (checks / LIB).mkdir()
    for shared in sorted(needed_modules):   # the course's shared probe code (its model) that a kept probe imports
        shutil.copyfile(course.solutions / LIB / f"{shared}.py", checks / LIB / f"{shared}.py")
    # the copied catalogs hold every criterion's sentences, which say what the hidden criteria check: keep only
    # those of the code the checker ships
    for lang in LANGS:
        if (target / "grader" / "locale" / lang).is_dir():
            update_catalogs(lang, target / "grader", checks)
    (target / "course.toml").write_text(checker_course_toml(course, visible), encoding="utf-8")
    (target / "pyproject.toml").write_text(checker_pyproject(course), encoding="utf-8")
    shutil.copyfile(TOOL_ROOT / "scripts" / "install-torch.sh", target / "install-torch.sh")
