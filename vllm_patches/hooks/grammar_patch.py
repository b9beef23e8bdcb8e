"""Structured outputs on an asymspec engine: the hidden tokens (hidden_tokens.py) never advance a request's grammar.

vLLM's scheduler feeds each step's new tokens to the request's grammar (update_from_output: grammar.accept_tokens)
before our hook strips the hidden ones. The prime token is x_comp's last prompt token, not an answer token (a
JSON grammar rejects it, and vLLM logs "grammar rejected tokens"); a re-emitted token was accepted once before
the preemption that held it back (accepting it again would put the grammar one token ahead of the answer). The
step that emits a hidden token emits nothing else (a prefill's last chunk), so that step leaves the grammar as it
is. Everything else is vLLM's: the grammar bitmask over the K+1 verified positions, applied to the verifier's
logits before our sampler (gpu_model_runner.sample_tokens: apply_grammar_bitmask, then _sample), and the drafts
cut to their longest prefix the grammar accepts (update_draft_token_ids: grammar.validate_tokens). A position where
the grammar allows no token the pair may commit: ../grammar_dead_end.py.
"""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def hidden_tokens_skip_grammar(scheduler, requests):
    """Around vLLM's update_from_output: `requests` (those whose next output starts with a hidden token) do not
    advance their grammar this step. requests: the scheduler's Request objects."""
    manager = getattr(scheduler, "structured_output_manager", None)
    held = {id(r) for r in requests if r is not None and r.use_structured_output}
    if manager is None or not held:
        yield
        return
    own = vars(manager).get("should_advance")  # None: the class's method
    should_advance = manager.should_advance
    manager.should_advance = lambda request: (
        id(request) not in held and should_advance(request)
    )
    try:
        yield
    finally:
        if own is None:
            del manager.should_advance
        else:
            manager.should_advance = own
