"""What the supervisor tells the worker of an exercise's probes, read from their source on the host.

The worker never imports a probe module itself: each exercise's child loads its own exercise's probe code (and
the course model it imports) from files staged for that exercise in the supervisor's folder, outside the box
(`stage_code`), so that no other exercise's probe code is on the box's disk or in a child's memory. What the
worker needs beforehand comes from here, read without importing anything:

- the probes in order and how they share a child (`probe_specs`, `probe_groups`);
- each probe's own seed (`grader.worker.seeds`): the worker and the box never see the course's seed;
- the modules the probe code imports (`preload`): the worker imports those once, before any exercise's clock starts
  (torch._dynamo alone takes a second), so that a child pays only for its own probe module.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import marshal
import os
from pathlib import Path

PROBES_PACKAGE = "grader.probes"
STAGED = ".probes"   # scratch/.probes/<exercise>/: the exercise's compiled probe code, root-only


@functools.cache
def _tree(module: str, mtime_ns: int) -> ast.Module:
    return ast.parse(Path(_origin(module)).read_text(encoding="utf-8"))


def _origin(module: str) -> str:
    """The module's source file, found without importing it (nor trusting a loaded copy's spec)."""
    if module.startswith(PROBES_PACKAGE + "."):
        package = importlib.util.find_spec(PROBES_PACKAGE)
        assert package is not None and package.origin is not None   # the grader's own package
        return os.path.join(os.path.dirname(package.origin), module.rsplit(".", 1)[1] + ".py")
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"no probe module {module}")
    return spec.origin


def _parsed(module: str) -> ast.Module:
    return _tree(module, os.stat(_origin(module)).st_mtime_ns)


def probe_specs(module: str) -> list[tuple[str, bool]]:
    """(name, isolated) of each `@probe` / `@probe(isolated=True)` function of the module, in source order."""
    specs = []
    for node in _parsed(module).body:
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


def probe_groups(module: str) -> list[list[str]]:
    """The probes split into the groups that share a child: consecutive plain probes, each isolated one alone."""
    groups: list[list[str]] = []
    current: list[str] = []
    for name, isolated in probe_specs(module):
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


def _imports(module: str) -> list[str]:
    """Every module the source imports, at any depth (a probe may import inside a function)."""
    found = []
    for node in ast.walk(_parsed(module)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module)
    return found


def probe_code_modules(module: str) -> list[str]:
    """The probe module and the modules of the probes package it imports (the course model), dependencies first."""
    order: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        for dep in _imports(name):
            if dep.startswith(PROBES_PACKAGE + ".") and dep != name:
                visit(dep)
        order.append(name)

    visit(module)
    return order


def preload(modules: list[str]) -> list[str]:
    """What the probe code of `modules` imports from outside the probes package, for the worker to import up front."""
    wanted: dict[str, None] = {}
    for module in modules:
        for name in probe_code_modules(module):
            for dep in _imports(name):
                if dep != PROBES_PACKAGE and not dep.startswith(PROBES_PACKAGE + "."):
                    wanted.setdefault(dep)
    return sorted(wanted)


@functools.cache
def _compiled(origin: str, mtime_ns: int, size: int, filename: str) -> bytes:
    return marshal.dumps(compile(Path(origin).read_bytes(), filename, "exec", dont_inherit=True))


def stage_code(module: str, folder: Path, box_lib: str | None) -> list[list[str]]:
    """Write the compiled code of the probe module and the probe modules it imports into `folder` (made root-only:
    the child reads it before it drops to the grading's uid); return [module, file name] in import order.
    `box_lib`: where the grader package sits in the box, so that the code names no host path; None: unboxed."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    staged = []
    for name in probe_code_modules(module):
        origin = _origin(name)
        info = os.stat(origin)
        short = name.rsplit(".", 1)[1]
        shown = f"{box_lib}/grader/probes/{short}.py" if box_lib else origin
        target = folder / f"{short}.code"
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(_compiled(origin, info.st_mtime_ns, info.st_size, shown))
        staged.append([name, target.name])
    return staged
