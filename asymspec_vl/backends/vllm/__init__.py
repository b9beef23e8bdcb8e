"""The vLLM backend: engines (the only engine builder), their processes' life, every method on them."""
