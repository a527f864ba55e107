"""report.html is one self-contained file that headless Chromium renders without a console error."""

import re
import shutil
import subprocess

import pytest

from conftest import ROOT

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=2000"]


def render(page, tmp_path) -> tuple[str, list[str]]:
    """The DOM after scripts ran, and every console message Chromium logged."""
    assert CHROMIUM, "Debian's chromium is needed for this test: apt-get install -y chromium"
    done = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return done.stdout, console


@pytest.fixture(scope="module")
def sample_report(tmp_path_factory):
    from conftest import run_grader

    out = tmp_path_factory.mktemp("html")
    done = run_grader("grade", str(ROOT / "examples" / "submissions" / "sample"), "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out / "report.html"


def test_console_errors_are_detected(tmp_path):
    """The check below can fail: a page with a script error is caught."""
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><html><body><script>notDefined();</script></body></html>")
    _, console = render(page, tmp_path)
    assert any("notDefined" in line for line in console)


def test_report_renders_without_console_errors(sample_report, tmp_path):
    dom, console = render(sample_report, tmp_path)
    assert console == []
    assert "<section class=\"exercise\"" in dom


def test_report_is_self_contained(sample_report):
    html = sample_report.read_text()
    external = re.findall(r"""(?:src|href)\s*=\s*["'](?:https?:)?//""", html)
    assert external == []
    assert "<link " not in html and "@import" not in html


def test_report_shows_every_criterion(sample_report):
    import json

    report = json.loads((sample_report.parent / "report.json").read_text())
    html = sample_report.read_text()
    for exercise in report["exercises"]:
        assert f'id="{exercise["id"]}"' in html
        for c in exercise["criteria"]:
            assert f"<code>{c['id']}</code>" in html
    assert f"{report['score']:g} / {report['max_score']:g}" in html


def test_student_markup_in_a_report_stays_text_in_the_browser(tmp_path):
    """A message and a submission name carrying <img onerror=...>, ESC and a surrogate: no element is made of them."""
    from hostile_report import hostile_report

    from grader.reporting import write_reports

    write_reports(hostile_report(), tmp_path, ROOT / "templates", "en", ("html",))
    dom, console = render(tmp_path / "report.html", tmp_path)
    assert console == []
    assert "<img" not in dom and "&lt;img src=x onerror=alert(1)&gt;" in dom
