"""Write the README's pictures of the reports into docs/img/, with headless Chromium (the helpers the HTML report's
tests use, tests/browser.py): the sample submission's report.html in English and Chinese, 1280 px wide (its top
1800 px) and 400 px wide (its top 1400 px), its failures alone (the page as its "only show what did not pass"
box shows it, without the header and summary), and class.html of the class tests/sample_class.py builds (the
sample, the solutions, the stubs, a zip, a broken zip, a folder named in Chinese, a roster of seven), graded in
English and then resumed with --lang zh (which grades nothing again), at 1280 px and 400 px in each language; and the
report of exercise 12 (audits) for a submission whose audits carry four known mistakes (the reference audits with
four of solutions/audits/mutants applied), 1280 px wide.

    .venv/bin/python scripts/screenshots.py [--out docs/img] [--sandbox strict|basic] [--only audits]

Needs Debian's chromium and fonts-noto-cjk (scripts/setup.sh --test installs both as root).
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


def audits_picture(work: Path, profile: Path, out: Path, sandbox: str) -> Path:
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
    return screenshot(report / "report.html", out / "audits-report.png", profile, 1280, 1700)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    parser.add_argument("--sandbox", choices=("strict", "basic"), default="strict")
    parser.add_argument("--only", choices=("audits",), help="write only this picture")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="screenshots-") as scratch:
        work, profile = Path(scratch), Path(scratch) / "profile"
        written = [audits_picture(work, profile, args.out, args.sandbox)]
        for lang in ("en", "zh") if args.only is None else ():   # the sample's report
            report = work / f"report-{lang}"
            grader("grade", str(SAMPLE), "--out", str(report), "--lang", lang, "--sandbox", args.sandbox,
                   "--format", "json,html")
            for name, (width, height) in SIZES.items():
                written.append(screenshot(report / "report.html", args.out / f"report-{lang}-{name}.png",
                                          profile, width, height))
            written.append(screenshot(failures_only(report / "report.html"), args.out / f"report-{lang}-failures.png",
                                      profile, 1280, 2600))
        from grader.course import load_course

        gradebook = work / "gradebook"
        room, roster = build_class(load_course(ROOT), work / "seven") if args.only is None else (None, None)
        # the second run grades nothing: it writes every page again in Chinese
        for lang in ("en", "zh") if args.only is None else ():
            grader("batch", str(room), "--out", str(gradebook), "--jobs", "2", "--sandbox", args.sandbox,
                   "--roster", str(roster), "--lang", lang)
            for name, (width, height) in CLASS_SIZES.items():
                written.append(screenshot(gradebook / "class.html", args.out / f"class-{lang}-{name}.png", profile,
                                          width, height))
    for png in written:
        print(png.relative_to(ROOT) if png.is_relative_to(ROOT) else png)


if __name__ == "__main__":
    main()
