"""`grader gradescope` states the Autograder Settings the course needs, computed from course.toml (every exercise's
memory_mb and timeout_s, the judge's memory, the grader's own memory and start-up), prints them and opens the
bundle's README.md with them; it refuses a stated setting that gives less memory or time, and warns when
Gradescope's defaults (768 MB, 10 minutes, 0.5 vCPU) would be used."""

from __future__ import annotations

import math
import re
import zipfile
from pathlib import Path

from conftest import ROOT, course_copy, run_grader
from grader.classroom.gradescope import (GRADER_OWN_MEMORY_MB, GRADESCOPE_DEFAULT_MEMORY_MB, Hardware, needs,
                                         shortfall)
from grader.course import load_course
from grader.sandbox.supervisor import STARTUP_SECONDS


def limited_course(folder: Path) -> Path:
    """Two exercises with limits of their own and a [judge] table: each figure of the settings is traceable."""
    course_copy(folder, ["heads", "masks"], timeout_s={"heads": 100, "masks": 50})
    toml = folder / "course.toml"
    text = toml.read_text()
    text = re.sub(r'(?m)^(id = "masks"\n)', r"\1memory_mb = 2000\n", text)
    text = text.replace("memory_mb = 3072", "memory_mb = 1500").replace("[defaults]", "[judge]\nmemory_mb = 300\n\n"
                                                                                    "[defaults]", 1)
    toml.write_text(text)
    return folder


def test_the_settings_follow_the_course_limits(tmp_path):
    course = load_course(limited_course(tmp_path / "course"))
    needed, made = needs(course)
    assert needed.memory_mb == GRADER_OWN_MEMORY_MB + 2000 + 300
    assert needed.timeout_min == math.ceil((STARTUP_SECONDS + 150) / 60)
    assert "the largest exercise memory_mb (2000 MB) + [judge] memory_mb (300 MB)" in made[0]
    assert "the timeout_s of 2 exercises (150 s)" in made[1]
    # a setting with exactly what it needs falls short of nothing; one MB or one minute less does
    assert shortfall(course, needed) == ([], [])
    less = Hardware(needed.memory_mb - 1, needed.timeout_min - 1, needed.cpus)
    assert shortfall(course, less) == ([f"{needed.memory_mb - 1} MB of memory where the course needs "
                                        f"{needed.memory_mb} MB",
                                        f"{needed.timeout_min - 1} minutes where the course needs "
                                        f"{needed.timeout_min}"], [])


def test_the_bundled_course_needs_more_than_gradescopes_defaults():
    """course.toml allows 3,072 MB per exercise and 11 x 60 s: above 768 MB and 10 minutes."""
    needed, _ = needs(load_course(ROOT))
    assert needed.memory_mb > GRADESCOPE_DEFAULT_MEMORY_MB and needed.timeout_min > 10


def test_gradescope_prints_the_settings_and_puts_them_in_the_bundles_readme(tmp_path):
    bundle = tmp_path / "autograder.zip"
    done = run_grader("gradescope", str(bundle), timeout=300)
    assert done.returncode == 0, done.stderr
    needed, made = needs(load_course(ROOT))
    assert f"Choose at least {needed.short()} in the assignment's Autograder Settings" in done.stdout
    assert all(line in done.stdout for line in made)
    # nothing stated: Gradescope's defaults would be used, and they fall short
    assert done.stderr.startswith("grader: warning: Gradescope's default Autograder Settings (768 MB, 10 minutes, "
                                  "0.5 vCPU) give 768 MB of memory where the course needs")
    with zipfile.ZipFile(bundle) as zf:
        readme = zf.read("README.md").decode()
    assert readme.startswith("## Gradescope Autograder Settings for this course\n")
    assert all(line in readme for line in made)
    assert readme.endswith((ROOT / "README.md").read_text())


def test_a_stated_setting_below_the_course_is_refused_and_one_above_is_not(tmp_path):
    folder = limited_course(tmp_path / "course")
    needed, _ = needs(load_course(folder))
    bundle = tmp_path / "autograder.zip"
    refused = run_grader("--course", str(folder), "gradescope", str(bundle), "--gradescope-memory-mb",
                         str(needed.memory_mb - 1), "--gradescope-timeout-min", str(needed.timeout_min), timeout=300)
    assert refused.returncode == 2 and not bundle.exists()
    assert refused.stderr == (f"grader: the chosen Gradescope setting ({needed.memory_mb - 1} MB, "
                              f"{needed.timeout_min} minutes, 0.5 vCPU) gives {needed.memory_mb - 1} MB of memory "
                              f"where the course needs {needed.memory_mb} MB (course.toml's memory_mb and timeout_s): "
                              "choose a larger setting, or lower those limits\n")
    short_time = run_grader("--course", str(folder), "gradescope", str(bundle), "--gradescope-memory-mb",
                            str(needed.memory_mb), "--gradescope-timeout-min", str(needed.timeout_min - 1),
                            timeout=300)
    assert short_time.returncode == 2 and not bundle.exists()
    assert f"{needed.timeout_min - 1} minutes where the course needs {needed.timeout_min}" in short_time.stderr
    enough = run_grader("--course", str(folder), "gradescope", str(bundle), "--gradescope-memory-mb",
                        str(needed.memory_mb), "--gradescope-timeout-min", str(needed.timeout_min),
                        "--gradescope-cpus", "1", timeout=300)
    assert enough.returncode == 0 and enough.stderr == "" and bundle.is_file()
    slow = run_grader("--course", str(folder), "gradescope", str(bundle), "--gradescope-memory-mb",
                      str(needed.memory_mb), "--gradescope-timeout-min", str(needed.timeout_min), timeout=300)
    assert slow.returncode == 0
    assert slow.stderr.startswith("grader: warning: the chosen Gradescope setting") and "0.5 vCPU where" in slow.stderr


def test_a_course_longer_than_gradescope_allows_is_refused(tmp_path):
    folder = course_copy(tmp_path / "course", ["heads", "masks"], timeout_s={"heads": 1500, "masks": 1500})
    done = run_grader("--course", str(folder), "gradescope", str(tmp_path / "a.zip"), timeout=300)
    assert done.returncode == 2 and not (tmp_path / "a.zip").exists()
    assert done.stderr == ("grader: the course needs a timeout of 53 minutes and Gradescope allows at most 40: lower "
                           "the exercises' timeout_s in course.toml\n")
    stated = run_grader("gradescope", str(tmp_path / "a.zip"), "--gradescope-timeout-min", "41", timeout=300)
    assert stated.returncode == 2 and "at most 40 minutes" in stated.stderr
