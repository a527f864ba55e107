
# ---- appended by the test to an exercise's solution ----------------------------------------------------------------
"""A correct solution file that also hunts, at import and in its first call, for what a grading keeps from student code:
other exercises' probe code (loaded modules, importable modules, files in the box) and the course's seed (`SEED`,
filled in by the test, anywhere in the memory it can walk: gc's containers, every frame's locals, the environment).

It prints `LEAK <what>` for each thing it finds, and two positive controls: `OWN <module>` when it sees its own
exercise's probe module loaded (the search of loaded modules works), and `PROBE-SEED <n> FOUND` when the memory
search finds the running probe's own seed (`torch.initial_seed()`), which the same search looks for as it looks
for the course's. `HUNTED <paths> <objects>` ends each hunt. The test fills in the exercise (`@OWN@`), the
course's other exercises and shared modules (`@OTHERS@`) and its solutions folder (`@SOLUTIONS@`, searched
outside the box, where nothing hides it). The second hunt runs in the first call of any function (or `forward`)
the solution defines, with the probes loaded.
"""

import functools as _functools
import gc as _gc
import importlib as _importlib
import os as _os
import sys as _sys
import types as _types

import torch as _torch

_SEED = int("@DEES@"[::-1])   # the test writes the digits reversed: this file's text does not hold the seed
_OWN = "grader.probes.@OWN@"
_OTHERS = @OTHERS@
_SKIP = ("/usr", "/opt/grader/site", "/proc", "/sys", "/dev")
_said = set()


def _say(line):
    if line not in _said:
        _said.add(line)
        print(line, flush=True)


def _memory_holds(number):
    """Whether `number` (or its digits) is anywhere gc or the stack reaches."""
    text = str(number)
    data = text.encode()

    def holds(item):   # the hunter's own objects (the same ones) aside
        if item is number or item is text or item is data:
            return False
        return (type(item) is int and item == number) or (isinstance(item, str) and text in item) or (
            isinstance(item, (bytes, bytearray)) and data in item)

    for obj in _gc.get_objects():
        try:
            items = list(obj.values()) + list(obj.keys()) if isinstance(obj, dict) else \
                list(obj) if isinstance(obj, (list, tuple, set, frozenset)) else list(vars(obj).values()) \
                if hasattr(obj, "__dict__") and not isinstance(obj, type) else []
        except Exception:  # noqa: BLE001 - a container that cannot be read says nothing
            continue
        if any(holds(item) for item in items):
            return True
    for thread_frame in _sys._current_frames().values():
        frame = thread_frame
        while frame is not None:
            if frame.f_code.co_filename != __file__ and any(holds(v) for v in frame.f_locals.values()):
                return True
            frame = frame.f_back
    return any(holds(f"{k}={v}") for k, v in _os.environ.items())


def _hunt(where):
    """One line per kind of thing found (the output tail is short)."""
    paths, loaded, imported, files = 0, [], [], []
    for name in sorted(_sys.modules):
        if name == _OWN:
            _say(f"OWN {name}")
        elif name.startswith("grader.probes."):
            loaded.append(name)
    for other in _OTHERS:
        before = set(_sys.modules)
        try:
            _importlib.import_module(f"grader.probes.{other}")
        except Exception:  # noqa: BLE001 - not importable: as it should be
            continue
        finally:
            for name in set(_sys.modules) - before:   # not to be taken for what the grader loaded
                del _sys.modules[name]
        imported.append(other)
    # In the box (no /proc) the whole file system is small: all of it. Outside (basic level): the grader's package,
    # the course's solutions folder and the scratch folder around this exercise's.
    tops = ["/"] if not _os.path.exists("/proc") else [_os.path.dirname(_os.getcwd()), "@SOLUTIONS@"]
    try:
        import grader as _grader

        tops += list(_grader.__path__) if _os.path.exists("/proc") else []
    except Exception:  # noqa: BLE001
        pass
    for top, dirs, names in (entry for start in tops for entry in _os.walk(start)):
        dirs[:] = [d for d in dirs if not _os.path.join(top, d).startswith(_SKIP) and d != "__pycache__"]
        for name in names:
            path = _os.path.join(top, name)
            paths += 1
            if "/probes/" in path and name != "__init__.py":
                files.append(path)
            elif name.endswith((".py", ".code")) and path != _os.path.abspath(__file__):
                try:
                    with open(path, "rb") as fh:
                        if b"\n@probe" in fh.read(1 << 20):   # a probe defined there
                            files.append(path)
                except OSError:
                    pass
    if loaded:
        _say(f"LEAK {where}: loaded {', '.join(loaded)}")
    if imported:
        _say(f"LEAK {where}: imported {', '.join(imported)}")
    if files:
        _say(f"LEAK {where}: {len(files)} files of probe code, {files[0]} first")
    if _memory_holds(_SEED):
        _say(f"LEAK {where}: the course seed in memory")
    print(f"HUNTED {paths} {len(_gc.get_objects())}", flush=True)


_hunt("import")


def _hunting(function):
    @_functools.wraps(function)
    def first_call_hunts(*args, **kwargs):
        if "call" not in _said:
            _said.add("call")
            _hunt("call")
            seed = _torch.initial_seed()
            if _memory_holds(seed):
                _say(f"PROBE-SEED {seed} FOUND")
        return function(*args, **kwargs)
    return first_call_hunts


for _name, _value in list(globals().items()):   # the solution's own functions and modules, above
    if _name.startswith("_") or getattr(_value, "__module__", None) != __name__:
        continue
    if isinstance(_value, _types.FunctionType):
        globals()[_name] = _hunting(_value)
    elif isinstance(_value, type) and "forward" in vars(_value):
        _value.forward = _hunting(_value.forward)
