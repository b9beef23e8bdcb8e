"""Benchmark scripts (run with python -m asymspec_vl.evals.benchmarks.<name>): they print figures."""
