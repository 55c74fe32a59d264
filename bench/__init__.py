"""Benchmarks: each prints rates measured against a reference in the same run."""
