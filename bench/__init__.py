"""Benchmarks: each prints its figures next to a reference measured in the same run.

Run one with ``python -m bench.<name>``; timing targets live here as printed
ratios, never in tests.
"""
