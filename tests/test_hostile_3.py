"""Hostile and broken submissions, part 3 of hostile_suite.PARTS: the cases dealt to this part, graded and checked
by tests/hostile_suite.py (which says what every grading must show)."""

from hostile_suite import *  # noqa: F403 - the tests, their fixtures and the hook that picks this part's cases

PART = 3
