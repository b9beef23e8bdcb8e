"""The transformers backend: one model + view + KV cache per logit source, and Algorithm 1 from scratch (the oracle)."""
