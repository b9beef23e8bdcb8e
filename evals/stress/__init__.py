"""The differential stress test of the vLLM path against the transformers backend (see __main__.py)."""
