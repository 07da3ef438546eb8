"""Benchmarks and generators, run by hand; importable from tests."""
