"""Autograder for GPU-kernel assignments: hidden pytest suites against a sandboxed submission."""
__version__ = "0.1.0"
