"""What students get (the handout, its checker) and where grades go (GitHub, Gradescope, LMS)."""
