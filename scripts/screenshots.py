"""Write the README's pictures of the reports into docs/img/, with headless Chromium (the helpers the HTML report's
tests use, tests/browser.py): the sample submission's report.html in English and Chinese, 1280 px wide (its top
1800 px) and 400 px wide (its top 1400 px), its failures alone (the page as its "only show what did not pass"
box shows it, without the header and summary), and class.html of the class tests/sample_class.py builds (the
sample, the solutions, the stubs, a zip, a broken zip, a folder named in Chinese, a roster of seven), graded in
English and then resumed with --lang zh (which grades nothing again), at 1280 px and 400 px in each language;
and `grader review` on the class of five tests/review_class.py builds (written answers to embedding's question),
its first page and an answer graded by the keyboard, at 1280 px and 400 px in each language; and the report of
exercise 12 (audits) for a submission whose audits carry four known mistakes (the reference audits with four of
solutions/audits/mutants applied), 1280 px wide.

    .venv/bin/python scripts/screenshots.py [--out docs/img] [--sandbox strict|basic]
        [--only reports|class|review|audits]

Needs Debian's chromium, chromium-driver and fonts-noto-cjk (scripts/setup.sh --test installs them as root).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from browser import screenshot  # noqa: E402  (tests/ is put on the path just above)
from sample_class import build_class  # noqa: E402

SAMPLE = ROOT / "examples" / "submissions" / "sample"
# the audit mistakes of the audits picture: each loses part of one audit's points, and names what it missed
AUDIT_MISTAKES = ("causality_last_position_only", "registration_count_only", "gradients_none_only",
                  "targets_one_text_only")
SIZES = {"1280": (1280, 1800), "400": (400, 1400)}
CLASS_SIZES = {"1280": (1280, 1250), "400": (400, 1800)}
REVIEW_SIZES = {"1280": (1280, 1000), "400": (400, 1500)}


def grader(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "grader", *args], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"grader {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")


def failures_only(page: Path) -> Path:
    """A copy of the report with its filter box ticked and the header and summary hidden: the failures and their
    pictures come first."""
    copy = page.with_name("failures.html")
    html = page.read_text(encoding="utf-8").replace('id="only-problems">', 'id="only-problems" checked>', 1)
    copy.write_text(html.replace("</style>", "header, nav.summary { display: none; }</style>", 1), encoding="utf-8")
    return copy


def report_pictures(work: Path, profile: Path, out: Path, sandbox: str) -> list[Path]:
    written = []
    for lang in ("en", "zh"):
        report = work / f"report-{lang}"
        grader("grade", str(SAMPLE), "--out", str(report), "--lang", lang, "--sandbox", sandbox,
               "--format", "json,html")
        for name, (width, height) in SIZES.items():
            written.append(screenshot(report / "report.html", out / f"report-{lang}-{name}.png",
                                      profile, width, height))
        written.append(screenshot(failures_only(report / "report.html"), out / f"report-{lang}-failures.png",
                                  profile, 1280, 2600))
    return written


def class_pictures(work: Path, profile: Path, out: Path, sandbox: str) -> list[Path]:
    from grader.course import load_course

    written = []
    gradebook = work / "gradebook"
    room, roster = build_class(load_course(ROOT), work / "seven")
    for lang in ("en", "zh"):   # the second run grades nothing: it writes every page again in Chinese
        grader("batch", str(room), "--out", str(gradebook), "--jobs", "2", "--sandbox", sandbox,
               "--roster", str(roster), "--lang", lang)
        for name, (width, height) in CLASS_SIZES.items():
            written.append(screenshot(gradebook / "class.html", out / f"class-{lang}-{name}.png", profile,
                                      width, height))
    return written


def review_pictures(work: Path, profile: Path, out: Path, sandbox: str) -> list[Path]:
    """The review's first page, and an answer graded with keys 1 and 2, a comment and `s`: the first answer in
    English, the one written in Chinese (cy's, the third) in Chinese."""
    from review_class import KEY, browser, grade_class, page_url, press, pressed, save, served, tab_to, text_of

    from grader.course import load_course

    written = []
    gradebook = grade_class(load_course(ROOT), work / "five", sandbox)
    shown = {"en": (0, "Shapes and dtype right; the padding row's gradient is not explained."),
             "zh": (2, "形状和 dtype 都对；没有说明 padding 行的梯度。")}
    with served(gradebook, "--ta", "alice") as urls:
        base = urls["alice"]
        with browser(work, "graded") as driver:
            for n, comment in shown.values():
                driver.get(page_url(base, n))
                for key in "12":
                    press(driver, key)
                tab_to(driver, "comment")
                press(driver, comment)
                save(driver)
                assert pressed(driver) == {"1", "2"}
            assert "cy" in text_of(driver, "#student").lower(), "the Chinese pictures show cy's answer, in Chinese"
        for lang, (n, _) in shown.items():
            for name, (width, height) in REVIEW_SIZES.items():
                with browser(work, f"{lang}-{name}", width, height) as driver:
                    for page, url in (("index", base), ("answer", page_url(base, n))):
                        driver.get(f"{url}?lang={lang}")
                        assert driver.find_elements("css selector", f'[data-progress="{KEY}"], #answer')
                        png = out / f"review-{page}-{lang}-{name}.png"
                        driver.get_screenshot_as_file(str(png))
                        written.append(png)
    return written


def audits_pictures(work: Path, profile: Path, out: Path, sandbox: str) -> list[Path]:
    """report.html of exercise 12 alone, for audits written with AUDIT_MISTAKES."""
    from grader.review.unidiff import apply_diff

    solutions = ROOT / "solutions" / "audits"
    text = (solutions / "audits.py").read_text(encoding="utf-8")
    for mistake in AUDIT_MISTAKES:
        text = apply_diff(text, (solutions / "mutants" / mistake / "change.diff").read_text(encoding="utf-8"))
    submission = work / "audits-submission"
    (submission / "audits").mkdir(parents=True)
    (submission / "audits" / "audits.py").write_text(text, encoding="utf-8")
    report = work / "audits-report"
    grader("grade", str(submission), "--exercise", "audits", "--out", str(report), "--sandbox", sandbox,
           "--format", "json,html")
    return [screenshot(report / "report.html", out / "audits-report.png", profile, 1280, 1700)]


PICTURES = {"reports": report_pictures, "class": class_pictures, "review": review_pictures, "audits": audits_pictures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    parser.add_argument("--sandbox", choices=("strict", "basic"), default="strict")
    parser.add_argument("--only", choices=tuple(PICTURES), help="take these pictures alone (default: all)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="screenshots-") as scratch:
        work, profile = Path(scratch), Path(scratch) / "profile"
        written = []
        for name, take in PICTURES.items():
            if args.only in (None, name):
                written += take(work, profile, args.out, args.sandbox)
    for png in written:
        print(png.relative_to(ROOT) if png.is_relative_to(ROOT) else png)


if __name__ == "__main__":
    main()
