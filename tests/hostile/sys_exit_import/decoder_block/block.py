"""Hostile: sys.exit(0) while the grader imports this file."""

import sys

sys.exit(0)
