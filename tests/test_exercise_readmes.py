"""Each exercise README lists exactly what is judged: every criterion of the exercise, by its title, with the
points course.toml gives it, in English and in Chinese, and nothing else."""

import re

import pytest

from grader.course import load_course
from grader.judge.session import criteria_of

from conftest import ROOT

COURSE = load_course(ROOT)
# (the heading that opens the section, a listed criterion: title and points)
SECTIONS = {"en": ("### What is judged", re.compile(r"^- (.+) \((\d+(?:\.\d+)?) points?\)$")),
            "zh": ("### 评分看什么", re.compile(r"^- (.+)（(\d+(?:\.\d+)?) 分）$"))}


def listed(readme: str, language: str) -> dict[str, float]:
    """title -> points of the criteria the README's section for `language` lists."""
    heading, item = SECTIONS[language]
    lines = readme.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("#")), len(lines))
    return {m[1]: float(m[2]) for line in lines[start + 1:end] if (m := item.match(line))}


@pytest.mark.parametrize("language", sorted(SECTIONS))
@pytest.mark.parametrize("exercise_id", [e.id for e in COURSE.exercises])
def test_readme_lists_every_criterion_with_its_points(exercise_id, language):
    ex = COURSE.exercise(exercise_id)
    judged = {meta.title[language]: float(ex.points.get(meta.id, 0)) for meta in criteria_of(exercise_id)}
    readme = (ROOT / "exercises" / exercise_id / "README.md").read_text(encoding="utf-8")
    assert listed(readme, language) == judged


WRITTEN = {"en": ("### Written answers", re.compile(r"^- `(\w+)`: (.+)$")),
           "zh": ("### 书面回答", re.compile(r"^- `(\w+)`：(.+)$"))}


@pytest.mark.parametrize("language", sorted(WRITTEN))
@pytest.mark.parametrize("exercise_id", [e.id for e in COURSE.exercises])
def test_readme_lists_every_written_question_with_its_prompt(exercise_id, language):
    """The README says where answers go and lists exactly the course's questions, each with its prompt."""
    ex = COURSE.exercise(exercise_id)
    readme = (ROOT / "exercises" / exercise_id / "README.md").read_text(encoding="utf-8")
    heading, item = WRITTEN[language]
    lines = readme.splitlines()
    start = lines.index(heading)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("#")), len(lines))
    section = lines[start + 1:end]
    assert "answers.md" in "\n".join(section) and f"`{exercise_id}:" in "\n".join(section)
    assert [(m[1], m[2]) for line in section if (m := item.match(line))] == [
        (q.id, q.prompt[language]) for q in ex.questions]
