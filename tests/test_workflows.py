"""Every workflow the project ships passes actionlint and GitHub's workflow schema (check-jsonschema's vendored copy):
the handout's (written as templates/handout/check.yml is) and the instructor's classroom workflow."""

import pytest
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

# end to end: every test here grades in a sandbox (`pytest -m "not slow"` leaves them out)
pytestmark = pytest.mark.slow

TOOLS = Path(sys.executable).parent      # both come with the test extras, into this environment
WORKFLOWS = sorted(ROOT.glob("templates/**/*.yml")) + sorted(ROOT.glob(".github/workflows/*.yml"))


def test_every_shipped_workflow_is_found():
    assert {p.name for p in WORKFLOWS} >= {"check.yml", "grade-class.yml"}


def test_actionlint_passes():
    done = subprocess.run([str(TOOLS / "actionlint"), "-shellcheck=", "-no-color", *map(str, WORKFLOWS)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_github_workflow_schema_passes():
    done = subprocess.run([str(TOOLS / "check-jsonschema"), "--builtin-schema", "vendor.github-workflows",
                           *map(str, WORKFLOWS)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
