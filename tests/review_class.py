"""A class of five who answered embedding's written question, graded by `grader batch` as an instructor grades it,
`grader review` served on it, and the keys a TA presses there in Chromium (Selenium, tests/browser.py), for
tests/test_review_browser.py and scripts/screenshots.py.

Each hands in embedding alone (its file and answers.md): four the reference solution, Dee the solution with its
range check taken out (so the autograded points differ), and every answer differs. Eve's answer is an attack on the
page: a `<script>`, a `javascript:` link in Markdown and raw HTML whose handler would run, each setting
`window.__xss` and the title.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from browser import driven
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

ROOT = Path(__file__).resolve().parent.parent
EXERCISE, QUESTION = "embedding", "tensor_flow"
KEY = f"{EXERCISE}/{QUESTION}"   # the question as the page's data-question and data-progress name it
ROSTER = ("id,name,email,canvas_id\n"
          "2024001,Ann Lee,ann@uni.edu,1001\n"
          "2024002,Bo Chen,bo@uni.edu,1002\n"
          "2024003,Cy Wu,cy@uni.edu,1003\n"
          "2024004,Dee Park,dee@uni.edu,1004\n"
          "2024005,Eve Hart,eve@uni.edu,1005\n")
# what the page runs if an answer's markup ever becomes the page's: each piece on its own sets `window.__xss` to its
# number and changes the title (`void(0)` keeps a followed `javascript:` link from replacing the page with a string)
XSS_MARK = "window.__xss"
XSS_TITLE = "pwned"


def _runs(number: int) -> str:
    return f"{XSS_MARK}={number};document.title='{XSS_TITLE}';void(0)"


XSS_PIECES = {
    "script": f"<script>{_runs(1)}</script>",
    "markdown link": f"[open the notes](javascript:{_runs(2)})",
    "raw html": f"<img src=x onerror=\"{_runs(3)}\">",
    "html link": f"<a href=\"javascript:{_runs(4)}\">notes</a>",
}
ANSWERS = {   # submission folder -> its answer to embedding/tensor_flow
    "ann": "The ids are **int64** of shape `[B, T]`; each id picks a row of `weight [vocab_size, dim]`, so the\n"
           "output is `[B, T, dim]`. The padding row gets no gradient.",
    "bo": "ids [B, T] (long) -> weight[ids] -> [B, T, dim]. Same as one-hot @ weight without the one-hot.",
    "cy": "输入是 `[B, T]` 的 int64 id，按 id 取 `weight` 的行，输出 `[B, T, dim]`；padding 行的梯度为 0。",
    "dee": "The embedding multiplies the ids by the weight matrix [dim, vocab_size].",
    "eve": "Rows are looked up by id.\n\n" + "\n\n".join(XSS_PIECES.values()) + "\n",
}
RANGE_CHECK = "if lo < 0 or hi >= self.vocab_size:"
UNCHECKED = {"dee"}   # hands in the solution without its range check: fewer autograded points than the others


def unchecked(solution: str) -> str:
    assert RANGE_CHECK in solution, "the embedding solution must check its ids' range with this line"
    return solution.replace(RANGE_CHECK, "if False:")


def build_class(course, folder: Path) -> tuple[Path, Path]:
    """Write the five submissions and the roster into `folder`: (the class folder, the roster CSV)."""
    exercise = course.exercise(EXERCISE)
    room = folder / "class"
    for name, answer in ANSWERS.items():
        (room / name / EXERCISE).mkdir(parents=True)
        source = course.solution(exercise).read_text(encoding="utf-8")
        (room / name / EXERCISE / exercise.file).write_text(unchecked(source) if name in UNCHECKED else source,
                                                           encoding="utf-8")
        (room / name / EXERCISE / "answers.md").write_text(f"## {QUESTION}\n\n{answer}\n", encoding="utf-8")
    os.chmod(room, 0o700)   # the basic sandbox refuses a class folder every user can enter
    roster = folder / "roster.csv"
    roster.write_text(ROSTER, encoding="utf-8")
    return room, roster


def grader(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    done = subprocess.run([sys.executable, "-m", "grader", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)
    assert done.returncode == 0, f"grader {' '.join(args)} ended {done.returncode}: {done.stderr[-3000:]}"
    return done


def grade_class(course, folder: Path, sandbox: str = "basic", lang: str = "en") -> Path:
    """The class graded into `folder`/out with grades.csv, canvas.csv and every report: the gradebook to review."""
    room, roster = build_class(course, folder)
    out = folder / "out"
    grader("batch", str(room), "--out", str(out), "--jobs", "2", "--sandbox", sandbox, "--roster", str(roster),
           "--format", "canvas", "--lang", lang)
    return out


URL_LINE = re.compile(r"^review: (\S+) (http://\S+/)$")


@contextmanager
def served(gradebook: Path, *options: str, tas: int = 1, timeout: float = 60) -> Iterator[dict[str, str]]:
    """`grader review GRADEBOOK --port 0 OPTIONS` running while the block runs: {TA name: the URL printed for them},
    read from its `review: NAME URL` lines. Ended (SIGTERM, then killed) when the block ends."""
    process = subprocess.Popen([sys.executable, "-m", "grader", "review", str(gradebook), "--port", "0", *options],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    lines: queue.Queue[str | None] = queue.Queue()
    said: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            said.append(line)
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    urls: dict[str, str] = {}
    try:
        while len(urls) < tas:
            try:
                line = lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"grader review printed no URL in {timeout} s: {''.join(said)[-3000:]}") \
                    from None
            if line is None:
                raise AssertionError(f"grader review ended ({process.wait()}): {''.join(said)[-3000:]}")
            found = URL_LINE.match(line)
            if found:
                urls[found.group(1)] = found.group(2)
        yield urls
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def copy_of(gradebook: Path, folder: Path) -> Path:
    """A copy of a graded class's output folder (gradebook.sqlite, the class files, every report) to change."""
    shutil.copytree(gradebook, folder)
    return folder


# --- the page, as a TA works it with the keyboard (the DOM the review page promises: grader/review_app) -------------

FIELDS = ("input", "textarea", "select")   # where the page's keys are typed as text instead
WAIT_S = 20                                # for a page to answer, on a busy machine


@contextmanager
def browser(tmp_path: Path, name: str = "ta", width: int = 1280, height: int = 900) -> Iterator[WebDriver]:
    driver = driven(tmp_path / f"profile-{name}", width, height)
    try:
        yield driver
    finally:
        driver.quit()


def press(driver: WebDriver, *keys: str) -> None:
    """Keys typed into whatever has the focus, as a TA types them."""
    ActionChains(driver).send_keys(*keys).perform()


def focused(driver: WebDriver) -> WebElement:
    return driver.switch_to.active_element


def tab_to(driver: WebDriver, element_id: str, most: int = 60) -> WebElement:
    """Tab through the page until the element `element_id` has the focus: it is reached by the keyboard."""
    for _ in range(most):
        if focused(driver).get_attribute("id") == element_id:
            return focused(driver)
        press(driver, Keys.TAB)
    raise AssertionError(f"#{element_id} is not reached with Tab")


def leave_field(driver: WebDriver) -> None:
    """Escape out of a text field, where the page's keys are typed as text, back to the keys."""
    if focused(driver).tag_name.lower() in FIELDS:
        press(driver, Keys.ESCAPE)
    assert focused(driver).tag_name.lower() not in FIELDS, "Escape does not leave the field"


def wait(driver: WebDriver, condition, what: str):
    """condition(driver) once it is true; after WAIT_S, a failure saying `what` and what #status says then."""
    try:
        return WebDriverWait(driver, WAIT_S).until(condition)
    except TimeoutException:
        status = [e.text for e in driver.find_elements(By.ID, "status")]
        raise AssertionError(f"{what} (after {WAIT_S} s; #status: {status}; at {driver.current_url})") from None


def text_of(driver: WebDriver, css: str) -> str:
    return driver.find_element(By.CSS_SELECTOR, css).text


def pressed(driver: WebDriver) -> set[str]:
    """The rubric items the page shows applied."""
    return {b.get_attribute("data-item") for b in driver.find_elements(By.CSS_SELECTOR, "#rubric button[data-item]")
            if b.get_attribute("aria-pressed") == "true"}


def page_url(base: str, n: int) -> str:
    return f"{base}q/{KEY}/{n}"


def saved(driver: WebDriver, before: str) -> bool:
    """The page says "saved" where it said `before` ("not saved yet", a conflict): the server stored the grade."""
    now = text_of(driver, "#status").strip()
    return now != before and now.lower().startswith("saved")


def save(driver: WebDriver) -> None:
    """`s`, and the page says the answer is saved."""
    leave_field(driver)
    before = text_of(driver, "#status").strip()
    press(driver, "s")
    wait(driver, lambda d: saved(d, before), "the page never says saved")
