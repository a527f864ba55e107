"""What the supervisor tells the worker of an exercise's probes, read from their source on the host.

A course's probe code is its files, read from the course folder (grader/course.py): an exercise's
<solutions>/<id>/probes.py and the shared <solutions>/_lib/<name>.py it imports as `grader.probes.<name>`.
The worker never imports a probe module itself: each exercise's child loads its own exercise's probe code (and
the shared code it imports) from files staged for that exercise in the supervisor's folder, outside the box
(`stage_code`), compiled and root-only, so that no other exercise's probe code is on the box's disk or in a
child's memory. What the worker needs beforehand comes from here, read without importing anything:

- the probes in order and how they share a child (`probe_specs`, `probe_groups`);
- each probe's own seed (`grader.worker.seeds`): the worker and the box never see the course's seed;
- the modules the probe code imports (`preload`): the worker imports those once, before any exercise's clock starts
  (torch._dynamo alone takes a second), so that a child pays only for its own probe module.
"""

from __future__ import annotations

import ast
import functools
import marshal
import os
from pathlib import Path

PROBES_PACKAGE = "grader.probes"   # the package a course's probe code is loaded into, in the worker as on the host
STAGED = ".probes"   # scratch/.probes/<exercise>/: the exercise's compiled probe code, root-only
LIB = "_lib"         # beside the exercises' folders: the course's shared probe code (grader.course.LIB)


@functools.cache
def _tree(origin: str, mtime_ns: int) -> ast.Module:
    return ast.parse(Path(origin).read_text(encoding="utf-8"))


def _parsed(origin: str) -> ast.Module:
    return _tree(origin, os.stat(origin).st_mtime_ns)


def module_name(origin: str) -> str:
    """The name a probe file is loaded under: an exercise's <solutions>/<id>/probes.py as grader.probes.<id>, a
    shared <solutions>/_lib/<name>.py as grader.probes.<name>."""
    path = Path(origin)
    short = path.stem if path.parent.name == LIB else path.parent.name
    return f"{PROBES_PACKAGE}.{short}"


def _dependency(origin: str, name: str) -> str:
    """The file of the course's shared probe code that `grader.probes.<name>` names, beside the exercise's folder."""
    found = Path(origin).parent.parent / LIB / (name.rsplit(".", 1)[1] + ".py")
    if not found.is_file():
        raise ModuleNotFoundError(f"{origin} imports {name}, and the course has no {found}")
    return str(found)


def probe_specs(origin: str) -> list[tuple[str, bool]]:
    """(name, isolated) of each `@probe` / `@probe(isolated=True)` function of the probe file, in source order."""
    specs = []
    for node in _parsed(origin).body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for d in node.decorator_list:
            target = d.func if isinstance(d, ast.Call) else d
            if isinstance(target, ast.Name) and target.id == "probe":
                isolated = isinstance(d, ast.Call) and any(
                    k.arg == "isolated" and isinstance(k.value, ast.Constant) and k.value.value is True
                    for k in d.keywords)
                specs.append((node.name, isolated))
    return specs


def probe_groups(origin: str) -> list[list[str]]:
    """The probes split into the groups that share a child: consecutive plain probes, each isolated one alone."""
    groups: list[list[str]] = []
    current: list[str] = []
    for name, isolated in probe_specs(origin):
        if isolated:
            if current:
                groups.append(current)
                current = []
            groups.append([name])
        else:
            current.append(name)
    if current:
        groups.append(current)
    return groups


def _imports(origin: str) -> list[str]:
    """Every module the source imports, at any depth (a probe may import inside a function)."""
    found = []
    for node in ast.walk(_parsed(origin)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module)
    return found


def probe_code_modules(origin: str) -> list[tuple[str, str]]:
    """[module name, file] of the probe file and of the course's shared probe code it imports, dependencies first."""
    order: dict[str, str] = {}

    def visit(name: str, path: str) -> None:
        if name in order:
            return
        order[name] = ""   # taken: an import cycle ends here
        for dep in _imports(path):
            if dep.startswith(PROBES_PACKAGE + ".") and dep != name:
                visit(dep, _dependency(path, dep))
        del order[name]
        order[name] = path

    visit(module_name(origin), origin)
    return list(order.items())


def preload(origins: list[str]) -> list[str]:
    """What the probe files import from outside the probes package, for the worker to import up front."""
    wanted: dict[str, None] = {}
    for origin in origins:
        for _, path in probe_code_modules(origin):
            for dep in _imports(path):
                if dep != PROBES_PACKAGE and not dep.startswith(PROBES_PACKAGE + "."):
                    wanted.setdefault(dep)
    return sorted(wanted)


@functools.cache
def _compiled(origin: str, mtime_ns: int, size: int, filename: str) -> bytes:
    return marshal.dumps(compile(Path(origin).read_bytes(), filename, "exec", dont_inherit=True))


def stage_code(origin: str, folder: Path, box_lib: str | None) -> list[list[str]]:
    """Write the compiled code of the probe file and the shared probe code it imports into `folder` (made root-only:
    the child reads it before it drops to the grading's uid); return [module, file name] in import order.
    `box_lib`: where the grader package sits in the box, so that the code names no host path; None: unboxed."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    staged = []
    for name, path in probe_code_modules(origin):
        info = os.stat(path)
        short = name.rsplit(".", 1)[1]
        shown = f"{box_lib}/grader/probes/{short}.py" if box_lib else path
        target = folder / f"{short}.code"
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(_compiled(path, info.st_mtime_ns, info.st_size, shown))
        staged.append([name, target.name])
    return staged
