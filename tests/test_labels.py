"""The interface words of every output exist in both languages, for every status and criterion kind; the terminal
table lines its columns up by display width, so a Chinese report's columns stay aligned."""

import pytest
from hostile_report import _exercise, hostile_report

from grader.i18n import LANGS
from grader.judge.criterion import KINDS, CriterionMeta
from grader.judge.session import Outcome
from grader.render.labels import CLASS_LABELS, LABELS, STATUS_MARK
from grader.render.safe_text import terminal_text
from grader.render.terminal import MESSAGE_COLUMNS, display_width, fit, render_table
from grader.report.build import exercise_result
from grader.report.model import EXERCISE_STATUSES


def test_every_language_has_the_same_labels():
    assert set(LABELS) == set(LANGS)
    assert set(LABELS["en"]) == set(LABELS["zh"])


@pytest.mark.parametrize("lang", LANGS)
def test_every_status_and_kind_has_a_label(lang):
    missing = ([s for s in EXERCISE_STATUSES if not LABELS[lang].get(s)]
               + [k for k in KINDS if not LABELS[lang].get(f"kind_{k}")])
    assert missing == []
    assert set(STATUS_MARK) == set(EXERCISE_STATUSES)


def test_the_class_report_has_the_same_words_in_each_language():
    """class.html's words: every standing, cell state and flag kind in both languages, none left in English."""
    from grader.batch.gradebook import CELL_STATES, STANDING_WORDS

    assert set(CLASS_LABELS) == set(LANGS) and set(CLASS_LABELS["en"]) == set(CLASS_LABELS["zh"])
    needed = [*STANDING_WORDS, *(f"cell_{state}" for state in CELL_STATES), "identical"]
    assert [key for key in needed if not CLASS_LABELS["en"].get(key)] == []
    assert sorted(key for key, word in CLASS_LABELS["zh"].items() if word == CLASS_LABELS["en"][key]) == []


# Words the Chinese course keeps in English: a name, and the attention axes (the course writes "query", "key").
KEPT_IN_ENGLISH = {"torch", "key_axis", "query_axis"}


def test_chinese_labels_are_chinese():
    """A zh label copied from the English would show English in a Chinese report."""
    same = sorted(key for key, word in LABELS["zh"].items()
                  if word == LABELS["en"][key] and key not in KEPT_IN_ENGLISH)
    assert same == []


def test_display_width_counts_a_cjk_character_as_two_columns():
    assert display_width("通过") == 4 and display_width("passed") == 6 and display_width("a通b") == 4


@pytest.mark.parametrize("text", ["通过 9 / 11 个评分项；探针 `forward` 抛出了 ValueError" * 4, "ab" * 80, "a通" * 60])
def test_fit_cuts_by_display_width(text):
    cut = fit(text, 40)
    assert cut.endswith("…") and display_width(cut) <= 40 and display_width(cut) >= 39
    assert text.startswith(cut[:-1])


def test_fit_leaves_a_short_text_whole():
    assert fit("通过 9 / 11 个评分项", 40) == "通过 9 / 11 个评分项"


def _zh_report():
    """The hostile report, with an exercise whose long Chinese message must be cut and whose status label is long."""
    report = hostile_report("grader_error")
    long_message = {"en": "the probe raised " * 20, "zh": "探针 `forward` 抛出了异常，" * 20}
    meta = CriterionMeta(id="logits", kind="shape", title={"en": "logits", "zh": "logits 形状"},
                         hint={"en": "look", "zh": "看看"})
    report.exercises.append(exercise_result(_exercise("transformer_lm", {"logits": 3.0}),
                                            [Outcome(meta, "error", long_message, {})], {}))
    return report


def test_a_chinese_table_keeps_its_columns_in_line():
    """Status words of different widths (报错, 未通过, 评分器故障) and the total's label (总分) still leave every
    column starting at one display column: the score's end, the status word, the message."""
    report = _zh_report()
    rows = [line for line in render_table(report, "zh").splitlines() if line.startswith("  ")]
    assert len(rows) == len(report.exercises) + 1   # one per exercise, and the total
    score_ends, status_starts, message_starts = set(), set(), set()
    for row, exercise in zip(rows[:-1], report.exercises, strict=True):   # the last row is the total
        score, word = f"{exercise.score:g}/{exercise.max_score:g}", LABELS["zh"][exercise.status]
        message = fit(terminal_text(exercise.message["zh"]), MESSAGE_COLUMNS)
        assert row.endswith(message) and display_width(message) <= MESSAGE_COLUMNS, row
        score_ends.add(display_width(row[:row.index(score) + len(score)]))
        status_starts.add(display_width(row[:row.index(word)]))
        message_starts.add(display_width(row[:len(row) - len(message)]))
    total = f"{report.score:g}/{report.max_score:g}"
    score_ends.add(display_width(rows[-1][:rows[-1].index(total) + len(total)]))
    assert len({display_width(LABELS["zh"][e.status]) for e in report.exercises}) > 1, "the test needs unequal words"
    assert (len(score_ends), len(status_starts), len(message_starts)) == (1, 1, 1), "\n".join(rows)


def test_a_chinese_message_past_the_width_is_cut_with_an_ellipsis():
    rows = render_table(_zh_report(), "zh").splitlines()
    row = next(line for line in rows if line.lstrip().startswith("transformer_lm"))
    assert row.endswith("…") and "探针 `forward` 抛出了异常" in row
    message = row[row.index("探针"):]
    assert MESSAGE_COLUMNS - 1 <= display_width(message) <= MESSAGE_COLUMNS
