"""Per-request state of an asymspec engine: extra_args parsed, rows, hidden tokens, the x_full pool ledger, failures,
statistics, M-RoPE positions."""
