"""Tools for the instructor who writes a course: `grader new-exercise` (skeleton.py) and its templates/."""
