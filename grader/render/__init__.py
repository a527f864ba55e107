"""Renderers: each turns the one report model into one format. None computes a score."""
