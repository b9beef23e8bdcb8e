"""Model backends: transformers (hf) and the patched vLLM 0.19 path (vllm)."""
