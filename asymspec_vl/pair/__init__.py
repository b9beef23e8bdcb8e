"""Which models: where a model name points, the embedded default pair, loading transformers models."""
