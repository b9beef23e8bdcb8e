"""Evaluations (MathVista, the toy world) and benchmark scripts; installed as asymspec_vl.evals."""
