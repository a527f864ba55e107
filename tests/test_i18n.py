"""Every sentence in both languages: the catalogs match the source, each template is translated with the same
placeholders, and no sentence reaches a report without passing through a template."""

import ast
import json
import re
from pathlib import Path

import pytest

import grader
from grader import i18n
from grader.i18n import LOCALE_DIR, extract_templates, placeholders, read_catalog, t, verbatim

PACKAGE = Path(grader.__file__).parent
SOLUTIONS = Path(grader.__file__).resolve().parent.parent / "solutions"   # the bundled course's probes and criteria
SOURCES = sorted([*PACKAGE.rglob("*.py"), *SOLUTIONS.glob("*/probes.py"), *SOLUTIONS.glob("*/criteria.py"),
                  *SOLUTIONS.glob("_lib/*.py")])
TEMPLATE_CALLS = set(i18n.KEYWORDS)
# What a criterion says through: its verdict and the exceptions that end it.
VERDICT_CALLS = {"ok", "fail", "check", "Verdict", "CriterionFailed", "StudentRaised", "NotAttempted", "TimedOut",
                 "Crashed", "Blocked", "GraderFault"}
HAN = re.compile("[\u4e00-\u9fff]")


@pytest.fixture(scope="module")
def extracted() -> dict[str, dict[str, list]]:
    return extract_templates()


@pytest.fixture(scope="module")
def catalogs() -> dict[str, dict[str, str]]:
    package = {po.stem: read_catalog(po) for po in sorted((LOCALE_DIR / "zh" / "LC_MESSAGES").glob("*.po"))}
    return {**package, **{po.parent.name: read_catalog(po) for po in sorted(SOLUTIONS.glob("*/zh.po"))}}


def _calls(name_set: set[str]):
    for source in SOURCES:
        tree = ast.parse(source.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
                if name in name_set:
                    yield source.relative_to(PACKAGE.parent), node, name


def test_every_template_is_a_literal():
    """A template built at run time (an f-string, a variable) has no catalog entry, so it would show English."""
    bad = [f"{path}:{node.lineno} {name}(...)" for path, node, name in _calls(TEMPLATE_CALLS)
           if not (node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str))]
    assert not bad, "templates that are not string literals:\n" + "\n".join(bad)


def test_verdicts_say_templates_not_strings():
    """`verdict.fail("...")` or `Crashed(f"...")` would be English in a Chinese report."""
    bad = []
    for path, node, name in _calls(VERDICT_CALLS):
        said = [a for a in node.args if isinstance(a, (ast.Constant, ast.JoinedStr, ast.BinOp))]
        if name == "check":
            said = [a for a in node.args[1:2] if isinstance(a, (ast.Constant, ast.JoinedStr, ast.BinOp))]
        if said:
            bad.append(f"{path}:{node.lineno} {name}(...)")
    assert not bad, "verdicts given a plain string instead of t(...):\n" + "\n".join(bad)


def test_catalogs_hold_exactly_the_source_templates(extracted, catalogs):
    """`python -m grader.i18n` was run after the last change of a template: none missing, none stale."""
    assert set(catalogs) == set(extracted)
    for domain, templates in extracted.items():
        missing = sorted(set(templates) - set(catalogs[domain]))
        stale = sorted(set(catalogs[domain]) - set(templates))
        assert not missing and not stale, f"{domain}.po: missing {missing[:5]}, stale {stale[:5]}"


def test_every_template_is_translated_with_the_same_placeholders(catalogs):
    problems = []
    for domain, entries in catalogs.items():
        for msgid, msgstr in entries.items():
            if not msgstr:
                problems.append(f"{domain}: no translation of {msgid!r}")
            elif placeholders(msgid) != placeholders(msgstr):
                problems.append(f"{domain}: {msgid!r} has {sorted(placeholders(msgid))}, its translation "
                                f"{sorted(placeholders(msgstr))}")
    assert not problems, "\n".join(problems[:40]) + f"\n({len(problems)} in all)"


def test_translations_are_chinese(catalogs):
    """A translation with words in it holds Chinese (a copied English msgstr passes the placeholder check)."""
    english_only = [f"{d}: {msgstr!r}" for d, entries in catalogs.items() for msgid, msgstr in entries.items()
                    if msgstr and re.search(r"[A-Za-z]{3,} [a-z]{2,} [a-z]{2,}",
                                            re.sub(r"`[^`]*`|\{[^}]*\}", "", msgid))
                    and not HAN.search(msgstr)]
    assert not english_only, "\n".join(english_only[:20])


def test_templates_render_in_both_languages(catalogs):
    """Every template formats with its placeholders filled, in English and in Chinese."""
    for domain, entries in catalogs.items():
        for msgid in entries:
            params = {name: 1 for name in placeholders(msgid)}
            for lang in i18n.LANGS:
                try:
                    text = t(msgid, **params).render(lang)
                except (ValueError, TypeError):   # a numeric format spec given a number: try a string
                    text = t(msgid, **{name: "x" for name in params}).render(lang)
                assert text, f"{domain}: {msgid!r} renders empty in {lang}"


def test_a_plain_template_renders_as_the_general_formatter_does(catalogs):
    """Templates whose fields are plain names are formatted by str.format_map: every template of the catalogs, with
    numbers, strings, lists and a Text for its parameters, in both languages, says what i18n's own formatter says
    (or raises what it raises)."""
    def said(render, *args):
        try:
            return render(*args)
        except (ValueError, TypeError, KeyError) as exc:
            return type(exc)

    plain = 0
    for entries in catalogs.values():
        for msgid in entries:
            plain += i18n._plain_fields(msgid) is not None
            for value in (1, 2.5, "x", [1, 2], t("the import")):
                params = {name: value for name in placeholders(msgid)}
                for lang in i18n.LANGS:
                    template = msgid if lang == "en" else i18n.catalog(lang).get(msgid, msgid)
                    assert said(t(msgid, **params).render, lang) == \
                        said(i18n._Formatter(lang).vformat, template, (), params), (msgid, value, lang)
    assert plain > 0.9 * sum(map(len, catalogs.values()))   # nearly every template takes the plain way
    assert i18n._plain_fields("{x!r} and {y:{width}}") is None and i18n._plain_fields("{x:.3g}") == ("x",)


def test_a_parameter_text_is_rendered_in_the_same_language():
    said = t("{what} did not finish", what=t("the import"))
    texts = said.texts()
    assert texts["en"] == "the import did not finish"
    assert texts["zh"] != texts["en"] and HAN.search(texts["zh"])


def test_verbatim_is_the_same_in_every_language():
    assert set(verbatim("x @ W.T").texts().values()) == {"x @ W.T"}


def test_a_template_cannot_reach_into_its_parameters():
    """Templates come from the catalogs, but a translation must not read attributes of what it formats."""
    with pytest.raises(ValueError):
        t("{x.__class__}", x=1).render("en")


def test_a_bare_string_cannot_be_added_to_a_text():
    with pytest.raises(TypeError):
        t("the import") + "; more English"


def test_every_case_the_language_model_probe_names_in_words_has_a_template(course):
    """The transformer_lm probe names its bad-input cases in English (the worker has no catalog); the judge shows
    each through a template of its own, so a label added to or reworded in the probe must be added there too."""
    from conftest import criteria_module

    transformer_lm = criteria_module("transformer_lm")
    from grader.grading.pipeline import reference_folders

    folder = reference_folders(course, [course.exercise("transformer_lm")])["transformer_lm"]
    recorded = json.loads((folder / "bad_inputs.json").read_text(encoding="utf-8"))["values"]
    labels = {case["case"] for group in ("bad_tokens", "bad_targets") for case in recorded[group]}
    assert labels == set(transformer_lm.CASE_LABELS)


def test_a_template_in_several_catalogs_has_one_translation(catalogs):
    """The catalogs merge into one table: the same English in two areas must read the same in Chinese, or
    which one a report shows would depend on the files' order."""
    seen: dict[str, tuple[str, str]] = {}
    differ = []
    for domain, entries in sorted(catalogs.items()):
        for msgid, msgstr in entries.items():
            if msgid in seen and msgstr and seen[msgid][1] and seen[msgid][1] != msgstr:
                differ.append(f"{msgid!r}: {seen[msgid][0]} says {seen[msgid][1]!r}, {domain} says {msgstr!r}")
            seen.setdefault(msgid, (domain, msgstr))
    assert not differ, "\n".join(differ)


def test_a_verdict_refuses_a_plain_string():
    """Fails closed at run time too: a string that slipped past the source check ends the criterion as the
    grader's error instead of showing English in a Chinese report."""
    from grader.judge.criterion import VerdictRecorder
    from grader.judge.verdicts import CriterionFailed

    with pytest.raises(TypeError):
        CriterionFailed("logits have the wrong shape")
    with pytest.raises(TypeError):
        VerdictRecorder().ok("fine")
    assert CriterionFailed(t("the import")).message.texts()["en"] == "the import"
