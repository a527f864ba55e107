"""Probes, one module per exercise: grader code run in the sandbox next to the student's module."""
