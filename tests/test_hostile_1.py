"""Hostile and broken submissions, part 1 of hostile_suite.PARTS: the cases dealt to this part, graded and checked
by tests/hostile_suite.py (which says what every grading must show)."""

from hostile_suite import *  # noqa: F403 - the tests, their fixtures and the hook that picks this part's cases
from hostile_suite import test_strict_is_refused_without_root  # noqa: F401 - once, in the first part

PART = 1
