"""Looking inside a running engine (tests, benchmarks, the doctor): probes, captured logits, phase timing."""
