"""Headless Chromium for the HTML report's tests and scripts/screenshots.py: the DOM after scripts ran with the
console messages, a screenshot at a given window size, how wide the page lays out at a width and what on it does
not fit, the value of an expression on the page, and the dumped DOM parsed into an ElementTree; and the same
Chromium driven through Selenium (`driven`) for the pages a user works in, `grader review`'s."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from xml.etree import ElementTree

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# every run's: no sandbox (root, containers), nothing fetched from the network, no scrollbar in a screenshot
QUIET = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--disable-quic", "--hide-scrollbars"]
# a page loaded once from the command line: its console on stderr, its timers run before the dump
FLAGS = ["--headless", *QUIET, "--enable-logging=stderr", "--v=0", "--virtual-time-budget=2000"]
NEEDED = "Debian's chromium is needed: apt-get install -y chromium fonts-noto-cjk (scripts/setup.sh --test)"
# Debian's driver, the same build as its chromium: Selenium Manager would download one, which an offline machine cannot
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
DRIVER_NEEDED = "Debian's chromium-driver is needed: apt-get install -y chromium-driver (scripts/setup.sh --test)"


def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess:
    assert CHROMIUM, NEEDED
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120)


def driven(profile: Path, width: int = 1280, height: int = 900):
    """A Selenium WebDriver of headless Chromium, its viewport exactly width x height CSS pixels (a window may not
    be made narrower than 500 px; the device metrics can), its profile in `profile`. The caller quits it."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    assert CHROMIUM, NEEDED
    assert Path(CHROMEDRIVER).is_file(), DRIVER_NEEDED
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", *QUIET, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
    return driver


def dump_dom(page: Path, profile: Path, width: int = 1280, height: int = 2000) -> tuple[str, list[str]]:
    """The DOM after scripts ran, laid out in a window of width x height, and every console message logged."""
    done = _chromium(profile, f"--window-size={width},{height}", "--dump-dom", page.as_uri())
    return done.stdout, [line for line in done.stderr.splitlines() if ":CONSOLE" in line]


def screenshot(page: Path, png: Path, profile: Path, width: int, height: int) -> Path:
    """A PNG of the page's top `height` pixels in a window `width` pixels wide."""
    done = _chromium(profile, f"--window-size={width},{height}", f"--screenshot={png}", page.as_uri())
    assert png.is_file(), done.stderr[-2000:]
    return png


def layout_width(page: Path, profile: Path, width: int) -> tuple[int, int]:
    """(scrollWidth, clientWidth) of the page laid out `width` pixels wide: a scrollWidth above the clientWidth
    means the page scrolls sideways."""
    found = evaluate_at(page, profile, width, "document.documentElement.scrollWidth + ' ' + "
                                              "document.documentElement.clientWidth")
    scroll, client = found.split()
    return int(scroll), int(client)


def evaluate_at(page: Path, profile: Path, width: int, expression: str) -> str:
    """The value of a JavaScript expression on the page laid out `width` pixels wide. Headless Chromium lays out
    --dump-dom no narrower than 500 px, so the page is laid out in an iframe that wide, from a copy of it with one
    line of script added (the report itself carries none) that writes the value onto the frame around it."""
    measured = page.with_name(page.stem + f".measured-{width}.html")
    frame = page.with_name(page.stem + f".frame-{width}.html")
    measure = f"<script>parent.document.documentElement.dataset.result = String({expression});</script>"
    measured.write_text(page.read_text(encoding="utf-8").replace("</body>", measure + "</body>"), encoding="utf-8")
    frame.write_text(f'<!DOCTYPE html><html><body style="margin:0"><iframe src="{measured.name}" '
                     f'style="width:{width}px;height:900px;border:0"></iframe></body></html>', encoding="utf-8")
    done = _chromium(profile, "--allow-file-access-from-files", "--window-size=1280,1000", "--dump-dom", frame.as_uri())
    found = re.search(r'data-result="([^"]*)"', done.stdout)
    assert found, "the measuring script did not run"
    return html.unescape(found.group(1))


# Every element of the page that reaches past the window's right edge, or whose content is wider than its own
# box (text spilling out of a table cell): "tag.class" of each, at most ten.
SPILLING = """JSON.stringify((() => {
  const right = document.documentElement.clientWidth;
  return [...document.body.querySelectorAll('*')].filter(e => {
    const box = e.getBoundingClientRect();
    return box.width > 0 && (box.right > right + 0.5 || e.scrollWidth > e.clientWidth + 1 && e.clientWidth > 0
                             && getComputedStyle(e).display !== 'inline');
  }).slice(0, 10).map(e => e.tagName.toLowerCase() + '.' + (e.getAttribute('class') || '').replace(/ /g, '.'));
})())"""


def spilling(page: Path, profile: Path, width: int) -> list[str]:
    """The elements that do not fit the page laid out `width` pixels wide (SPILLING): none when nothing scrolls
    sideways, the page or any box on it."""
    import json

    return json.loads(evaluate_at(page, profile, width, SPILLING))


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _TreeBuilder(HTMLParser):
    """The DOM Chromium dumped, as an ElementTree (the standard library has no HTML tree of its own)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = ElementTree.Element("document")
        self.open = [self.root]

    def handle_starttag(self, tag, attrs):
        element = ElementTree.SubElement(self.open[-1], tag, {k: v or "" for k, v in attrs})
        if tag not in VOID:
            self.open.append(element)

    def handle_startendtag(self, tag, attrs):
        ElementTree.SubElement(self.open[-1], tag, {k: v or "" for k, v in attrs})

    def handle_endtag(self, tag):
        for depth in range(len(self.open) - 1, 0, -1):
            if self.open[depth].tag == tag:
                del self.open[depth:]
                return

    def handle_data(self, data):
        parent = self.open[-1]
        if len(parent):
            parent[-1].tail = (parent[-1].tail or "") + data
        else:
            parent.text = (parent.text or "") + data


def parse_dom(html: str) -> ElementTree.Element:
    builder = _TreeBuilder()
    builder.feed(html)
    builder.close()
    return builder.root


def with_class(root: ElementTree.Element, tag: str, cls: str) -> list[ElementTree.Element]:
    """Every `tag` element under `root` whose class list holds `cls`."""
    return [e for e in root.iter(tag) if cls in e.get("class", "").split()]


def text_of(element: ElementTree.Element) -> str:
    return "".join(element.itertext())


def evaluate(page: Path, profile: Path, expression: str, width: int = 1280) -> str:
    """The value of a JavaScript expression on the page once laid out, computed in a copy of the page with one line
    of script added (the report itself carries none)."""
    probe = page.with_name(page.stem + ".evaluated.html")
    script = f"<script>document.documentElement.dataset.result = String({expression});</script>"
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", script + "</body>"), encoding="utf-8")
    dom, _ = dump_dom(probe, profile, width, 1000)
    found = re.search(r'data-result="([^"]*)"', dom)
    assert found, "the evaluating script did not run"
    return found.group(1)
