"""Autograder for a course in which students build a decoder-only Transformer in PyTorch."""

__version__ = "0.1.0"
