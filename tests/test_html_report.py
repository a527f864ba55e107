"""report.html is one self-contained file that headless Chromium renders without a console error, with a summary on
top linking every exercise, a loss curve for each overfit criterion, a picture of each failure that has one, no
sideways scrolling at 400 px, and in Chinese no English sentence."""

import json
import re
import shutil
import struct

import pytest

from browser import dump_dom, evaluate, layout_width, parse_dom, screenshot, text_of, with_class
from conftest import ROOT

LANGS = ("en", "zh")
# exercises whose value and gradient failures the report draws as heat maps (grader/render/pictures.py)
DRAWN_EXERCISES = ("attention", "masks")


@pytest.fixture(scope="module")
def sample_reports(sample_graded, tmp_path_factory) -> dict:
    """The sample submission's report.html in each language (it fails criteria of several kinds): the English page
    as `grader grade` wrote it, the Chinese one rendered from the same report.json as `grade --lang zh` renders it
    (the report holds every message in both languages, so the two gradings' pages differ in their timestamps
    alone). Copies in a folder of this module's, since measuring a page writes files beside it."""
    from grader.report.model import Report
    from grader.render.files import write_reports

    assert sample_graded.returncode == 0, sample_graded.stderr
    pages = {}
    for lang in LANGS:
        out = tmp_path_factory.mktemp(f"html-{lang}")
        if lang == "en":
            shutil.copyfile(sample_graded.out / "report.html", out / "report.html")
        else:
            report = Report.from_dict(json.loads((sample_graded.out / "report.json").read_text()))
            write_reports(report, out, ROOT / "templates", lang, ("html",))
        pages[lang] = out / "report.html"
    return pages


@pytest.fixture(scope="module")
def sample_report(sample_reports):
    return sample_reports["en"]


@pytest.fixture(scope="module")
def sample_json(sample_graded) -> dict:
    return sample_graded.report


@pytest.fixture(scope="module")
def rendered_doms(sample_reports, tmp_path_factory) -> dict:
    """Each language's DOM as Chromium dumped it, with the console messages it logged."""
    profile = tmp_path_factory.mktemp("profile")
    return {lang: dump_dom(page, profile) for lang, page in sample_reports.items()}


@pytest.fixture(scope="module")
def doms(rendered_doms) -> dict:
    """Each language's rendered DOM, parsed."""
    parsed = {}
    for lang, (dom, console) in rendered_doms.items():
        assert console == []
        parsed[lang] = parse_dom(dom)
    return parsed


def rendered(page, tmp_path) -> tuple[str, list[str]]:
    return dump_dom(page, tmp_path / "profile")


def row_of(dom, exercise_id: str, criterion_id: str):
    rows = [e for e in dom.iter("tr") if e.get("id") == f"{exercise_id}--{criterion_id}"]
    assert len(rows) == 1, f"no row for {exercise_id}.{criterion_id}"
    return rows[0]


def test_console_errors_are_detected(tmp_path):
    """The check below can fail: a page with a script error is caught."""
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><html><body><script>notDefined();</script></body></html>")
    _, console = rendered(page, tmp_path)
    assert any("notDefined" in line for line in console)


@pytest.mark.slow
@pytest.mark.parametrize("lang", LANGS)
def test_report_renders_without_console_errors(rendered_doms, lang):
    dom, console = rendered_doms[lang]
    assert console == []
    assert "<section class=\"exercise " in dom


@pytest.mark.slow
def test_report_is_self_contained_and_needs_no_script(sample_report):
    html = sample_report.read_text()
    external = re.findall(r"""(?:src|href)\s*=\s*["'](?:https?:)?//""", html)
    assert external == []
    assert "<link " not in html and "@import" not in html
    assert "<script" not in html  # the "only what did not pass" filter is CSS (:has), the pictures inline SVG


@pytest.mark.slow
def test_report_shows_every_criterion(sample_report, sample_json):
    """Every criterion of a started exercise has its row, or its anchor in the one row of the parts not written yet;
    an exercise not started is its one line (the sample leaves checkpoint, audits and kv_cache)."""
    html = sample_report.read_text()
    untouched = [e for e in sample_json["exercises"] if e["status"] == "not_attempted"]
    assert [e["id"] for e in untouched] == ["checkpoint", "audits", "kv_cache"]
    for exercise in sample_json["exercises"]:
        assert f'id="{exercise["id"]}"' in html
        for c in exercise["criteria"]:
            if exercise in untouched:
                assert f"<code>{c['id']}</code>" not in html and f'id="{exercise["id"]}--{c["id"]}"' not in html
            elif c["status"] == "not_attempted":
                assert f'id="{exercise["id"]}--{c["id"]}"' in html
            else:
                assert f"<code>{c['id']}</code>" in html and f'id="{exercise["id"]}--{c["id"]}"' in html
    assert f"{sample_json['score']:g} / {sample_json['max_score']:g}" in html


@pytest.mark.slow
@pytest.mark.parametrize("lang", LANGS)
def test_summary_links_every_exercise_section_and_back(doms, sample_json, lang):
    dom = doms[lang]
    summary = with_class(dom, "table", "summary")
    assert len(summary) == 1
    rows = summary[0].find("tbody").findall("tr")
    assert len(rows) == len(sample_json["exercises"])
    sections = {s.get("id"): s for s in with_class(dom, "section", "exercise")}
    for row, exercise in zip(rows, sample_json["exercises"], strict=True):
        link = row.find(".//a")
        assert link.get("href") == f"#{exercise['id']}" and exercise["id"] in sections
        assert text_of(link).strip() == exercise["title"][lang]
        assert with_class(row, "div", "bar") and with_class(row, "span", exercise["status"])
        assert f"{exercise['score']:g} / {exercise['max_score']:g}" in text_of(row)
        back = with_class(sections[exercise["id"]], "a", "top")
        assert len(back) == 1 and back[0].get("href") == "#top"
    assert any(e.get("id") == "top" for e in dom.iter("header"))


@pytest.mark.slow
@pytest.mark.parametrize("lang", LANGS)
def test_each_overfit_criterion_has_a_loss_curve_with_axes_and_threshold(doms, sample_json, lang):
    from grader.render.labels import LABELS

    words = LABELS[lang]
    overfit = [(e["id"], c) for e in sample_json["exercises"] for c in e["criteria"] if c["kind"] == "overfit"]
    assert {exercise for exercise, _ in overfit} == {"transformer_lm", "training"}
    for exercise, c in overfit:
        curves = with_class(row_of(doms[lang], exercise, c["id"]), "svg", "loss-curve")
        assert len(curves) == 1, f"{exercise}.{c['id']}"
        titles = {text_of(e) for e in with_class(curves[0], "text", "axis-title")}
        assert titles == {words["step"], words["loss_log"]}
        assert len(with_class(curves[0], "line", "threshold")) == 1
        assert len(with_class(curves[0], "text", "tick")) >= 4
        assert len(with_class(curves[0], "circle", "final")) == 1


def expected_picture(exercise_id: str, c: dict) -> str | None:
    """The picture class a failing criterion of the sample must show, or None for kinds the report does not draw."""
    if c["kind"] == "causality":
        return "leaks" if "max_change_per_prefix" in c["evidence"] else "attention-maps"
    if exercise_id in DRAWN_EXERCISES and c["kind"] in ("values", "gradient"):
        return "attention-maps"
    if c["kind"] == "param_count":
        return "counts"
    if exercise_id == "rope" and c["id"] == "rotate_half_pairing":
        return "rope-pairing"
    return None


@pytest.mark.slow
def test_each_failure_of_a_drawn_kind_has_its_picture(doms, sample_json):
    drawn = set()
    for exercise in sample_json["exercises"]:
        for c in exercise["criteria"]:
            want = expected_picture(exercise["id"], c)
            if c["status"] != "failed" or want is None:
                continue
            for lang in LANGS:
                pictures = with_class(row_of(doms[lang], exercise["id"], c["id"]), "svg", want)
                assert len(pictures) == 1, f"{exercise['id']}.{c['id']} ({lang}) has no {want} picture"
            drawn.add(want)
    # the sample fails criteria of these kinds, so none of their pictures can go missing unnoticed
    assert drawn >= {"attention-maps", "counts", "rope-pairing"}


@pytest.mark.slow
def test_passed_criteria_show_no_failure_picture(doms, sample_json):
    for exercise in sample_json["exercises"]:
        for c in exercise["criteria"]:
            if c["status"] == "passed" and c["kind"] != "overfit":
                assert not with_class(row_of(doms["en"], exercise["id"], c["id"]), "svg", "picture")


def test_student_markup_in_a_report_stays_text_in_the_browser(tmp_path):
    """A message and a submission name carrying <img onerror=...>, ESC and a surrogate: no element is made of them."""
    from hostile_report import hostile_report

    from grader.render.files import write_reports

    write_reports(hostile_report(), tmp_path, ROOT / "templates", "en", ("html",))
    dom, console = rendered(tmp_path / "report.html", tmp_path)
    assert console == []
    assert "<img" not in dom and "&lt;img src=x onerror=alert(1)&gt;" in dom


VISIBLE = "[...document.querySelectorAll('{}')].filter(e => e.offsetParent !== null).length"


@pytest.mark.slow
def test_only_problems_box_hides_what_passed_without_a_script(sample_reports, tmp_path):
    page = sample_reports["en"]
    # the passed rows and the others shown, counted in one page load
    counts = f"{VISIBLE.format('table.criteria tr.passed')} + ' ' + " \
             f"{VISIBLE.format('table.criteria tbody tr:not(.passed)')}"
    shown, others = map(int, evaluate(page, tmp_path / "profile", counts).split())
    assert shown > 0 and others > 0
    ticked = tmp_path / "ticked.html"
    ticked.write_text(page.read_text().replace('id="only-problems">', 'id="only-problems" checked>', 1))
    assert tuple(map(int, evaluate(ticked, tmp_path / "profile", counts).split())) == (0, others)


def test_a_page_wider_than_its_window_is_detected(tmp_path):
    """The check below can fail: a 600 px wide block at 400 px is measured as sideways scrolling."""
    page = tmp_path / "wide.html"
    page.write_text("<!DOCTYPE html><html><body><div style='width:600px'>wide</div></body></html>")
    scroll, client = layout_width(page, tmp_path / "profile", 400)
    assert client == 400 and scroll > client


@pytest.mark.slow
@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("width", [400, 1280])
def test_report_does_not_scroll_sideways(sample_reports, tmp_path, lang, width):
    scroll, client = layout_width(sample_reports[lang], tmp_path / "profile", width)
    assert client == width and scroll <= client


def png_size(png) -> tuple[int, int]:
    header = png.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])


@pytest.fixture(scope="module")
def blank_sizes(tmp_path_factory) -> dict[tuple[int, int], int]:
    """The size of an empty page's PNG at each screenshot's window size: what a page of text, bars and pictures
    must be well above."""
    folder = tmp_path_factory.mktemp("blank")
    empty = folder / "empty.html"
    empty.write_text("<!DOCTYPE html><html><body></body></html>")
    return {(w, h): screenshot(empty, folder / f"empty-{w}.png", folder / "profile", w, h).stat().st_size
            for w, h in SCREENSHOT_SIZES}


SCREENSHOT_SIZES = [(1280, 1800), (400, 1400)]


@pytest.mark.slow
@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("width, height", SCREENSHOT_SIZES)
def test_screenshots(sample_reports, blank_sizes, tmp_path, lang, width, height):
    png = screenshot(sample_reports[lang], tmp_path / f"report-{lang}-{width}.png", tmp_path / "profile", width, height)
    assert png_size(png) == (width, height)
    assert png.stat().st_size > 4 * blank_sizes[width, height]  # text, bars and pictures, not an empty page


# A run of four or more English words: a sentence, not a term such as "masked softmax" or "Decoder Block".
ENGLISH_RUN = re.compile(r"\b[A-Za-z][a-z]+(?:[ ,;:'-]+[A-Za-z][a-z]+\b){3,}")
IDENTIFIER = re.compile(r"\S*[_.()\[\]=/<>`@#]\S*|\b[a-z]+[A-Z]\w*\b|\b[A-Z]\w*[A-Z]\w*\b")
NON_FINITE = re.compile(r"(?<![\w-])-?(?:nan|inf)(?![\w-])", re.IGNORECASE)   # numbers a picture writes in cells


def english_sentences(dom) -> list[str]:
    """Runs of several English words in the page's text, leaving out code, preformatted text, the style sheet,
    and identifiers (words with _ . ( ) [ ] =, or camelCase and CamelCase names)."""
    body = next(dom.iter("body"))
    for parent in list(body.iter()):
        for child in list(parent):
            if child.tag in ("code", "pre", "style", "script"):
                tail = child.tail
                parent.remove(child)
                if tail:  # keep the text that followed the removed element
                    parent.text = (parent.text or "") + " " + tail
    text = IDENTIFIER.sub(" ", " ".join(" ".join(body.itertext()).split()))  # blocks apart, so no two words join
    text = NON_FINITE.sub(" ", text)
    return ENGLISH_RUN.findall(text)


def test_english_sentences_are_found():
    """The check below can fail: an untranslated sentence is found; code, identifiers and terms are not."""
    dom = parse_dom("<html><body><p>张量 <code>return the loss of every step</code> 的 masked softmax 与 "
                    "nn.Parameter torch.nn.functional.softmax(x, dim=-1)</p>"
                    "<p>nan nan inf -inf NaN</p><p>the loss is not connected</p></body></html>")
    assert english_sentences(dom) == ["the loss is not connected"]


@pytest.mark.slow
def test_zh_report_holds_no_english_sentence(doms):
    """Passes once every message template has its Chinese translation (the catalogs in grader/locale/zh)."""
    assert english_sentences(doms["zh"]) == []
