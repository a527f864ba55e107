from grader.cli import run

# Guarded: Dask's local workers start by spawn, which imports this module again under another name.
if __name__ == "__main__":
    run()
