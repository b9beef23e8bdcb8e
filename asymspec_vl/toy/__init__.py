"""The toy world: a procedurally generated image-QA task and the trained tiny drafter/verifier pair for it."""
