"""What a re-judging keeps of the judge's conclusions: an exercise is judged again exactly when its judge version
changed, and outcomes a limit or the grader's own failure decided are never kept. No sandbox, no judge: the judge
here is a stand-in that records what it was asked."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ROOT
from grader.grading import rejudge
from grader.course import load_course


def _criterion(status: str = "passed", **evidence) -> dict:
    said = {"en": "observed", "zh": "observed"}
    return {"id": "c1", "kind": "values", "title": said, "hint": said, "points": 1.0, "max_points": 1.0,
            "status": status, "message": said, "evidence": evidence}


def _report(course, **criteria) -> dict:
    return {"exercises": [{"id": ex.id, "status": "passed", "criteria": [criteria.get(ex.id, _criterion())]}
                          for ex in course.exercises]}


class RecordingJudge:
    def __init__(self):
        self.asked: list[list[str]] = []

    def judge(self, entries: list[dict]) -> dict:
        self.asked.append([e["id"] for e in entries])
        return {e["id"]: [] for e in entries}


@pytest.fixture
def course(monkeypatch, tmp_path):
    monkeypatch.setattr(rejudge, "_references", lambda course, exercises, versions: {ex.id: tmp_path
                                                                                       for ex in exercises})
    return load_course(ROOT)


def _record(course, kept: dict) -> dict:
    staged = {"status": "ok", "message": None}
    return {**kept, "exercises": {ex.id: {"obs": None, "had_obs": False, "probes": [], "run": {}, "staged": staged,
                                          "facts": None} for ex in course.exercises}}


def test_kept_outcomes_spare_the_judge_until_an_exercise_version_changes(course, tmp_path):
    versions = rejudge.judge_versions(course)
    record = _record(course, rejudge.with_outcomes({}, _report(course), versions))
    judge = RecordingJudge()
    assert rejudge.judged_again(course, record, tmp_path, versions, judge) == {}
    assert judge.asked == []
    # the positive control: rope's judge version changed (its criteria, say), so rope alone is judged again
    changed = {**versions, "rope": "another version"}
    assert rejudge.judged_again(course, record, tmp_path, changed, judge) == {"rope": []}
    assert judge.asked == [["rope"]]
    # and the report built from the kept outcomes says what was kept, with the course's points
    report = rejudge.report_from(course, "s", {**record, "sandbox": {}, "started_at": ""}, versions, {})
    assert {(e.id, c.status, c.evidence == {}) for e in report.exercises for c in e.criteria} == \
        {(ex.id, "passed", True) for ex in course.exercises}


def test_outcomes_a_limit_or_the_grader_decided_are_judged_again(course, tmp_path):
    """A judging child killed (judge_exit), a limit the judging process enforced on itself (judge_limit: a criterion's
    CPU, the memory in use) and the grader's own failure: none is kept. The positive control: the other exercises'
    errors and failures, which the student's observations decided, are kept."""
    versions = rejudge.judge_versions(course)
    report = _report(course, rope=_criterion("error", judge_exit=-9), heads=_criterion("grader_error"),
                     masks=_criterion("error", judge_limit="criterion_cpu"), training=_criterion("error"),
                     attention=_criterion("error", judge_limit="memory"), embedding=_criterion("failed"))
    record = _record(course, rejudge.with_outcomes({}, report, versions))
    assert set(record["judged"]) == {ex.id for ex in course.exercises} - {"rope", "heads", "masks", "attention"}
    judge = RecordingJudge()
    rejudge.judged_again(course, record, tmp_path, versions, judge)
    assert [sorted(asked) for asked in judge.asked] == [["attention", "heads", "masks", "rope"]]


def test_the_judge_version_follows_the_course_criteria_and_limits_not_the_points(tmp_path):
    import dataclasses
    import shutil

    from grader.judge.limits import JudgeLimits

    course = load_course(ROOT)
    versions = rejudge.judge_versions(course)
    repointed = dataclasses.replace(course, exercises=tuple(
        dataclasses.replace(ex, points={k: v + 1 for k, v in ex.points.items()}) for ex in course.exercises))
    assert rejudge.judge_versions(repointed) == versions
    solutions = tmp_path / "solutions"   # the course's criteria, one exercise's changed, then the shared code
    shutil.copytree(course.solutions, solutions, ignore=shutil.ignore_patterns("mutants", "variants", "__pycache__"))
    copied = rejudge.judge_versions(dataclasses.replace(course, solutions=solutions))
    assert copied == versions
    with (solutions / "rope" / "criteria.py").open("a") as fh:
        fh.write("# the course changed rope's criteria\n")
    own = rejudge.judge_versions(dataclasses.replace(course, solutions=solutions))
    assert {ex for ex in versions if own[ex] != versions[ex]} == {"rope"}
    with (solutions / "_lib" / "lm.py").open("a") as fh:
        fh.write("# the course changed its shared code, which any criteria may import\n")
    shared = rejudge.judge_versions(dataclasses.replace(course, solutions=solutions))
    assert all(shared[ex] != own[ex] for ex in versions)
    limited = rejudge.judge_versions(dataclasses.replace(course, judge_limits=JudgeLimits(cpu_s=7)))
    assert all(limited[ex] != versions[ex] for ex in versions)


def _changed(before: dict, after: dict) -> set[str]:
    return {ex for ex in before if after[ex] != before[ex]}


def test_a_change_to_one_exercises_criteria_judges_that_exercise_alone(tmp_path, monkeypatch):
    """The course's criteria of one exercise changed (a tolerance fixed): that exercise alone is judged again; a
    change to what every exercise's judging shares (the judge's code, a catalog, the course's shared code, which
    any criteria module may import) judges every one again."""
    import dataclasses
    import shutil

    import grader

    course = load_course(ROOT)
    package = tmp_path / "grader"
    shutil.copytree(Path(grader.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(grader, "__file__", str(package / "__init__.py"))
    solutions = tmp_path / "solutions"
    shutil.copytree(course.solutions, solutions, ignore=shutil.ignore_patterns("mutants", "variants", "__pycache__"))
    course = dataclasses.replace(course, solutions=solutions)

    def versions() -> dict[str, str]:
        for cached in (rejudge._source_files, rejudge._grader_sources):
            cached.cache_clear()
        return rejudge.judge_versions(course)

    def edit(path: Path, line: str) -> None:
        path.write_text(path.read_text(encoding="utf-8") + line, encoding="utf-8")

    start = versions()
    edit(solutions / "rope" / "criteria.py", "\nTOLERANCE_FIXED = True\n")
    fixed = versions()
    assert _changed(start, fixed) == {"rope"}
    edit(package / "judge" / "compare.py", "\nSHARED_CHANGED = True\n")
    shared = versions()
    assert _changed(fixed, shared) == set(start)
    edit(solutions / "rope" / "zh.po", "\n")   # the catalogs are merged into one: every criterion's words
    catalog = versions()
    assert _changed(shared, catalog) == set(start)
    edit(package / "locale" / "zh" / "LC_MESSAGES" / "grader.po", "\n")
    assert _changed(catalog, versions()) == set(start)
    catalog = versions()
    edit(solutions / "_lib" / "lm.py", "\nMODEL_CHANGED = True\n")
    assert _changed(catalog, versions()) == set(start)


def test_pages_are_current_only_as_their_stamp_says_in_every_respect(tmp_path, monkeypatch):
    """Pages written with their stamp are found current for the same report.json, language and renderer; any other
    report.json, language or renderer, a page changed on the disk, or no stamp, and they are not."""
    from grader.render.files import write_atomic

    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "report.html.j2").write_text("{{ report }}\n")
    folder = tmp_path / "students" / "ann"
    names = ["report.json", "report.html", "scorecard.md"]
    pages = {"report.json": '{"score": 1}\n', "report.html": "<p>1</p>\n", "scorecard.md": "1\n"}
    for name, text in rejudge.stamped(pages, "en", templates).items():
        write_atomic(folder / name, text)

    def current(report_json: str = pages["report.json"], lang: str = "en") -> bool:
        rejudge.renderer_version.cache_clear()
        return rejudge.pages_current(folder, names, report_json, lang, templates)

    assert current()
    assert not current('{"score": 2}\n') and not current(lang="zh")
    assert not rejudge.pages_current(folder, [*names, "results.json"], pages["report.json"], "en", templates)
    (templates / "report.html.j2").write_text("{{ report }}!\n")   # another renderer
    assert not current()
    (templates / "report.html.j2").write_text("{{ report }}\n")
    assert current()
    (folder / "scorecard.md").write_text("2\n")                     # a page changed on the disk
    assert not current()
    (folder / "scorecard.md").write_text("1\n")
    assert current()
    (folder / rejudge.PAGES_STAMP).unlink()
    assert not current()


class OutcomeJudge:
    """A stand-in judge that gives each criterion an outcome (`evidence` for the exercises named there)."""

    def __init__(self, course, evidence: dict | None = None):
        from grader.judge.listing import criteria_of

        self.metas = {ex.id: criteria_of(ex.id, course.solutions) for ex in course.exercises}
        self.evidence = evidence or {}
        self.asked: list[list[str]] = []

    def judge(self, entries: list[dict]) -> dict:
        from grader.judge.criterion import Outcome

        self.asked.append(sorted(e["id"] for e in entries))
        return {e["id"]: [Outcome(m, "passed", {"en": "ok", "zh": "ok"}, dict(self.evidence.get(e["id"], {})))
                          for m in self.metas[e["id"]]] for e in entries}


def test_the_same_observations_are_judged_once_by_a_judge(course, tmp_path):
    """Two submissions whose stored observations are the same bytes conclude the same: the second is not judged.
    One whose rope run ended otherwise has rope alone judged; outcomes a limit decided are judged every time; and
    another judge (another re-judging) judges everything itself."""
    versions = rejudge.judge_versions(course)
    first, second = _record(course, {}), _record(course, {})
    judge = OutcomeJudge(course, evidence={"heads": {"judge_exit": -9}, "masks": {"judge_limit": "criterion_cpu"}})
    every = sorted(ex.id for ex in course.exercises)
    got = rejudge.judged_again(course, first, tmp_path, versions, judge)
    assert judge.asked == [every]
    again = rejudge.judged_again(course, second, tmp_path, versions, judge)
    assert judge.asked == [every, ["heads", "masks"]]   # a limit decided them, so they are never reused
    assert again == got
    other = _record(course, {})
    other["exercises"]["rope"]["run"] = {"exit": 1}
    rejudge.judged_again(course, other, tmp_path, versions, judge)
    assert judge.asked[-1] == ["heads", "masks", "rope"]
    fresh = OutcomeJudge(course)
    rejudge.judged_again(course, second, tmp_path, versions, fresh)
    assert fresh.asked == [every]


def test_the_reuse_switched_off_judges_alike_observations_each_time(course, tmp_path, monkeypatch):
    """GRADER_REJUDGE_ALIKE=0 (what the bench's class of distinct students sets) judges the second of two alike
    submissions too; the positive control is the test above, where the same two are judged once."""
    monkeypatch.setenv(rejudge.ALIKE_SWITCH, "0")
    versions = rejudge.judge_versions(course)
    judge = OutcomeJudge(course)
    every = sorted(ex.id for ex in course.exercises)
    got = rejudge.judged_again(course, _record(course, {}), tmp_path, versions, judge)
    again = rejudge.judged_again(course, _record(course, {}), tmp_path, versions, judge)
    assert judge.asked == [every, every] and again == got


def test_observations_are_laid_out_on_disk_when_memory_has_no_room(course, tmp_path, monkeypatch):
    """A tmpfs too small for a submission's observations (a container's 64 MB /dev/shm) costs nothing: they are
    laid out on disk instead and judged. The positive control: with room, they are laid out in memory."""
    import errno

    memory = tmp_path / "shm"
    memory.mkdir()
    monkeypatch.setattr(rejudge, "SCRATCH", memory)
    laid: list[Path] = []
    full = {"on": True}

    def materialise(store, files, folder):
        if full["on"] and memory in folder.parents:
            raise OSError(errno.ENOSPC, "No space left on device")
        laid.append(folder)
        folder.mkdir(parents=True)

    monkeypatch.setattr(rejudge, "_materialise", materialise)
    record = _record(course, {})
    record["exercises"]["rope"]["obs"] = {"forward.json": "0" * 64}
    versions = rejudge.judge_versions(course)
    judge = OutcomeJudge(course)
    rejudge.judged_again(course, record, tmp_path, versions, judge)
    assert len(laid) == 1 and memory not in laid[0].parents
    full["on"] = False
    rejudge.judged_again(course, record, tmp_path, versions, OutcomeJudge(course))
    assert len(laid) == 2 and memory in laid[1].parents
