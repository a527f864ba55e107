"""Proving the criteria (selftest, mutants) and reading a class's work side by side (similarity)."""
