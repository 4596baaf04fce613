"""Benchmarks (test_*.py, run by pytest-benchmark) and the harness they share (harness.py)."""
