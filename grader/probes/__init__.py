"""The package a course's probe code is loaded into; it holds none itself.

A course folder keeps each exercise's probes in solutions/<id>/probes.py and the code they share in
solutions/_lib/<name>.py (grader/course.py). In the sandbox the child of an exercise loads that exercise's staged
code as `grader.probes.<id>` and the shared code as `grader.probes.<name>` (grader/sandbox/probe_plan.py); in the
judge's process the shared code is importable under the same names (`grader.course.share_course_code`).
"""
