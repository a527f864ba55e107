"""A class graded: warm grading processes, here or on Dask, into a gradebook with its grades."""
