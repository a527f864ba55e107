"""`grader new-exercise ID --course DIR`: what the skeleton writes, and what it refuses with one sentence, exit
status 2 and nothing written. That the skeleton grades (selftest with 0 problems, a class graded with it) is
tests/test_course_folder.py's, which runs sandboxes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT
from grader.authoring import skeleton
from grader.authoring.skeleton import MUTANT, VARIANT, SkeletonError, exercise_files, new_exercise
from grader.cli import EXIT_USAGE, main
from grader.course import load_course
from grader.judge.listing import criteria_of
from grader.review.selftest import discover
from grader.sandbox.probe_plan import probe_specs
from test_exercise_readmes import listed

EXPECTED = ["course.toml", "exercises/{id}/{id}.py", "exercises/{id}/README.md", "exercises/{id}/test_{id}.py",
            "solutions/{id}/{id}.py", "solutions/{id}/probes.py", "solutions/{id}/criteria.py", "solutions/{id}/zh.po",
            f"solutions/{{id}}/mutants/{MUTANT}/change.diff", f"solutions/{{id}}/mutants/{MUTANT}/manifest.toml",
            f"solutions/{{id}}/variants/{VARIANT}/{{id}}.py", f"solutions/{{id}}/variants/{VARIANT}/manifest.toml"]


def tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_new_folder_becomes_a_course_holding_the_exercise(tmp_path):
    root = tmp_path / "my course"
    written = new_exercise(root, "double_it")
    assert written.new_course
    assert sorted(tree(root)) == sorted(p.format(id="double_it") for p in EXPECTED)
    assert [p.relative_to(root).as_posix() for p in written.files] == [p.format(id="double_it") for p in EXPECTED]
    course = load_course(root)
    assert course.name == "my course" and course.seed > 0
    ex = course.exercise("double_it")
    assert (ex.file, ex.points, ex.forbidden) == ("double_it.py", {"doubles": 1.0}, ())
    assert [m.id for m in criteria_of("double_it", course.solutions)] == ["doubles"]
    assert probe_specs(ex.probes_file) == [("double", False)]
    # the catalog reads as the selftest reads it: the reference, the variant, and the mutant built from its diff
    cases = {case.name: case for case in discover(course, course.solutions)}
    assert sorted(cases) == sorted(["reference", VARIANT, MUTANT])
    assert cases[MUTANT].expected == {"doubles": "failed"}
    assert cases[MUTANT].text != cases["reference"].text
    assert "return x * x" in cases[MUTANT].text and "return x * 2" in cases["reference"].text
    # the stub is the handout: untouched, it raises the stub's NotImplementedError
    assert 'raise NotImplementedError("double_it: implement double")' in course.stub(ex).read_text(encoding="utf-8")


def test_the_readme_lists_the_criterion_with_its_points_in_both_languages(tmp_path):
    new_exercise(tmp_path, "double_it")
    course = load_course(tmp_path)
    readme = (tmp_path / "exercises" / "double_it" / "README.md").read_text(encoding="utf-8")
    title = criteria_of("double_it", course.solutions)[0].title["en"]
    assert listed(readme, "en") == {title: 1.0}
    assert listed(readme, "zh") == {"double(x) 返回 2 * x": 1.0}


def test_every_sentence_of_the_probes_and_criteria_has_its_chinese(tmp_path):
    """The skeleton's catalog translates each t("...") template its probes and criteria say, with the same
    placeholders, and nothing else."""
    from babel.messages.pofile import read_po

    from grader.i18n import KEYWORDS, extract_python_ast, placeholders

    new_exercise(tmp_path, "double_it")
    mine = tmp_path / "solutions" / "double_it"
    said = set()
    for name in ("probes.py", "criteria.py"):
        with (mine / name).open("rb") as fh:
            said |= {message for _, _, message, _ in extract_python_ast(fh, KEYWORDS, [], {})}
    with (mine / "zh.po").open("rb") as fh:
        translated = {m.id: m.string for m in read_po(fh, locale="zh_CN") if m.id}
    assert set(translated) == said
    for template, chinese in translated.items():
        words = re.sub(r"\{\w+\}", "", template)   # what is left to translate around the placeholders
        assert chinese and (chinese != template or not re.search(r"[A-Za-z]", words)), template
        assert placeholders(chinese) == placeholders(template), template


def test_every_placeholder_of_every_template_is_filled(tmp_path):
    files = exercise_files("double_it")
    assert all("$" not in text for text in files.values()), [p for p, t in files.items() if "$" in t]
    config = skeleton.course_config(tmp_path / 'a "quoted" name')
    assert tomllib.loads(config)["course"]["name"] == 'a "quoted" name'


@pytest.mark.parametrize(("role", "file", "passes"), [("solution", "solutions/{id}/{id}.py", True),
                                                      ("variant", f"solutions/{{id}}/variants/{VARIANT}/{{id}}.py",
                                                       True),
                                                      ("stub", "exercises/{id}/{id}.py", False)])
def test_the_public_test_passes_the_solution_and_the_variant_and_not_the_stub(tmp_path, role, file, passes):
    course = tmp_path / "course"
    new_exercise(course, "double_it")
    student = tmp_path / "student"
    student.mkdir()
    (student / "double_it.py").write_bytes((course / file.format(id="double_it")).read_bytes())
    test = course / "exercises" / "double_it" / "test_double_it.py"
    (student / test.name).write_bytes(test.read_bytes())
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", test.name],
                          cwd=student, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(student)})
    assert (done.returncode == 0) == passes, done.stdout + done.stderr
    assert ("2 passed" if passes else "2 failed") in done.stdout, done.stdout


@pytest.mark.parametrize("end", ["\n", "\r\n"], ids=["lf", "crlf"])
def test_a_second_exercise_is_added_and_the_course_toml_kept_as_it_was(tmp_path, end):
    """The instructor's course.toml, comments, line ends and a missing last newline included, is kept byte for byte;
    the new table follows in the file's own line ends."""
    new_exercise(tmp_path, "first")
    config = tmp_path / "course.toml"
    edited = config.read_text(encoding="utf-8").replace("doubles = 1", "doubles = 3  # an instructor's comment")
    edited = edited.rstrip("\n").replace("\n", end).encode("utf-8")   # and no line end at the end
    config.write_bytes(edited)
    written = new_exercise(tmp_path, "second")
    assert not written.new_course
    after = config.read_bytes()
    assert after.startswith(edited + end.encode())
    added = after[len(edited):]
    assert added.count(end.encode()) == added.count(b"\n") > 5
    course = load_course(tmp_path)
    assert [(ex.id, ex.points) for ex in course.exercises] == [("first", {"doubles": 3.0}),
                                                               ("second", {"doubles": 1.0})]


def test_the_top_level_course_option_names_the_folder_too(tmp_path, capsys):
    assert main(["--course", str(tmp_path / "c"), "new-exercise", "scale"]) == 0
    out = capsys.readouterr().out
    assert "new course" in out and "exercises/scale/scale.py" in out and "selftest --exercise scale" in out
    assert load_course(tmp_path / "c").exercise("scale")


def _refused(capsys, argv: list[str], folder: Path, why: str) -> None:
    before = tree(folder) if folder.is_dir() else None
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("grader: ") and err.count("\n") == 1 and why in err, err
    assert (tree(folder) if folder.is_dir() else None) == before


@pytest.mark.parametrize(("exercise_id", "why"), [
    ("Double", "is not an exercise id"), ("double-it", "is not an exercise id"), ("_lib", "is not an exercise id"),
    ("1st", "is not an exercise id"), ("x" * 41, "is not an exercise id"), ("", "is not an exercise id"),
    ("class", "is a Python keyword"), ("match", "is a Python keyword"),
    ("probes", "the grader's own file"), ("criteria", "the grader's own file"),
    ("json", "an installed Python module"), ("torch", "an installed Python module"),
    ("pytest", "an installed Python module"), ("grader", "an installed Python module"),
])
def test_an_invalid_id_is_refused(tmp_path, capsys, exercise_id, why):
    _refused(capsys, ["new-exercise", exercise_id, "--course", str(tmp_path / "c")], tmp_path, why)
    assert not (tmp_path / "c").exists()


def test_an_existing_id_is_refused_and_the_course_left_as_it_was(tmp_path, capsys):
    new_exercise(tmp_path, "double_it")
    _refused(capsys, ["new-exercise", "double_it", "--course", str(tmp_path)], tmp_path, "exists already in")


@pytest.mark.parametrize("half", ["exercises", "solutions"])
def test_a_folder_of_the_id_that_course_toml_does_not_name_is_not_overwritten(tmp_path, capsys, half):
    new_exercise(tmp_path, "first")
    (tmp_path / half / "second").mkdir()
    (tmp_path / half / "second" / "notes.txt").write_text("mine")
    _refused(capsys, ["new-exercise", "second", "--course", str(tmp_path)], tmp_path,
             f"{tmp_path / half / 'second'} exists already")


def test_a_folder_that_holds_files_but_no_course_is_refused(tmp_path, capsys):
    (tmp_path / "thesis.tex").write_text("mine")
    _refused(capsys, ["new-exercise", "scale", "--course", str(tmp_path)], tmp_path, "holds files but no course.toml")


def test_a_course_toml_that_does_not_read_is_refused(tmp_path, capsys):
    (tmp_path / "course.toml").write_text("[course\n")
    _refused(capsys, ["new-exercise", "scale", "--course", str(tmp_path)], tmp_path, "cannot be read as it is")


def test_no_course_folder_named_is_refused(capsys):
    assert main(["new-exercise", "scale"]) == EXIT_USAGE
    assert "name the course folder" in capsys.readouterr().err


@pytest.mark.parametrize("existing", [False, True])
def test_a_failure_while_writing_leaves_nothing_behind(tmp_path, capsys, monkeypatch, existing):
    """Writing fails at its last step (course.toml's new table): the folders already moved into place go again,
    and the course is as it was (or the empty folder empty again)."""
    if existing:
        new_exercise(tmp_path, "first")
    before = tree(tmp_path)
    render = skeleton.render

    def failing(template: str, **values: str) -> str:
        if template == "exercise.toml":
            raise OSError(28, "No space left on device")
        return render(template, **values)

    monkeypatch.setattr(skeleton, "render", failing)
    assert main(["new-exercise", "second", "--course", str(tmp_path)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "No space left on device" in err and err.count("\n") == 1, err
    assert tree(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({Path(p).parts[0] for p in before})


def test_a_broken_template_is_the_graders_error_not_a_course_written(monkeypatch, tmp_path):
    """The skeleton's mutant is checked against its solution before anything is written."""
    render = skeleton.render
    monkeypatch.setattr(skeleton, "render", lambda template, **values: render(template, **values).replace(
        "return x * 2", "return 2 * x") if template == "solution.py" else render(template, **values))
    with pytest.raises(AssertionError, match="does not apply"):
        new_exercise(tmp_path / "c", "scale")
    assert not (tmp_path / "c").exists()


def test_the_templates_are_package_data_and_no_module():
    """They travel with an installed grader (pyproject's package-data), and no tool reads them as Python: not ruff,
    not mypy, not the catalog extraction of `python -m grader.i18n`."""
    names = sorted(p.name for p in skeleton.TEMPLATES.iterdir())
    assert names and all(name.endswith(".tmpl") for name in names), names
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]
    assert "authoring/templates/*.tmpl" in data["grader"]


def test_skeleton_error_is_one_sentence():
    with pytest.raises(SkeletonError) as caught:
        skeleton.check_id("Bad")
    assert "\n" not in str(caught.value)


def test_a_course_without_templates_renders_with_the_graders_own(tmp_path):
    """A new course has no templates/ of its own: its reports are rendered from the grader's (the acceptance test
    grades a class with one); a course that has one keeps it."""
    from grader.course import TOOL_TEMPLATES

    new_exercise(tmp_path, "scale")
    assert load_course(tmp_path).templates == TOOL_TEMPLATES
    assert (TOOL_TEMPLATES / "report.html.j2").is_file()
    (tmp_path / "templates").mkdir()
    assert load_course(tmp_path).templates == tmp_path.resolve() / "templates"


def test_a_new_course_hands_out_and_bundles_with_the_graders_own_files(tmp_path):
    """A course folder holds no pyproject.toml, scripts/ or grader/: the handout and the Gradescope bundle take those
    from the grader, the exercises and solutions from the course."""
    course = tmp_path / "course"
    new_exercise(course, "scale")
    assert main(["--course", str(course), "handout", str(tmp_path / "handout")]) == 0
    handout = tmp_path / "handout"
    assert (handout / "exercises" / "scale" / "scale.py").read_bytes() == (course / "exercises" / "scale" /
                                                                          "scale.py").read_bytes()
    assert load_course(handout / "checker").exercise("scale")
    assert (handout / "checker" / "install-torch.sh").is_file() and (handout / "pyproject.toml").is_file()
    assert not (handout / "checker" / "grader" / "authoring").exists()   # the instructor's tool stays home
    assert main(["--course", str(course), "gradescope", str(tmp_path / "bundle.zip")]) == 0
    names = set(zipfile.ZipFile(tmp_path / "bundle.zip").namelist())
    assert {"course.toml", "solutions/scale/probes.py", "solutions/scale/criteria.py", "exercises/scale/scale.py",
            "grader/cli.py", "pyproject.toml", "scripts/install-torch.sh", "templates/report.html.j2"} <= names


@pytest.mark.parametrize("argv", [["--course", "DIR", "selftest"], ["selftest", "--course", "DIR"],
                                  ["--course", "ELSEWHERE", "selftest", "--course", "DIR"],
                                  ["new-exercise", "x", "--course", "DIR"], ["--course", "DIR", "new-exercise", "x"],
                                  ["--course", "DIR", "batch", "class", "--out", "o"],
                                  ["batch", "class", "--out", "o", "--course", "DIR"]])
def test_the_course_folder_is_named_before_or_after_the_command(argv):
    from grader.cli import build_parser

    assert build_parser().parse_args(argv).course == Path("DIR")


def test_a_command_whose_own_course_option_means_another_thing_keeps_it():
    from grader.cli import build_parser

    args = build_parser().parse_args(["--course", "DIR", "lms", "canvas", "--course", "4711", "--assignment", "9",
                                      "gradebook"])
    assert (args.course, args.canvas_course) == (Path("DIR"), "4711")
