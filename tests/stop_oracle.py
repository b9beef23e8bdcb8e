"""The stop-string oracle of the tests: vLLM's own detokenizer (vllm/v1/engine/detokenizer.py, the
FastIncrementalDetokenizer a vLLM server runs) fed an answer's tokens step by step."""

from types import SimpleNamespace


def vllm_final(tok, ids, steps, stop, include, min_tokens) -> tuple[str, str, bool]:
    """(final text, streamed deltas joined, whether a stop string ended it) by vLLM's detokenizer."""
    from vllm import SamplingParams
    from vllm.v1.engine.detokenizer import IncrementalDetokenizer

    params = SamplingParams(
        stop=list(stop),
        include_stop_str_in_output=include,
        min_tokens=min_tokens,
        max_tokens=len(ids) + 1,
    )
    request = SimpleNamespace(
        sampling_params=params, prompt_token_ids=[], request_id="oracle"
    )
    det = IncrementalDetokenizer.from_new_request(tok, request)
    streamed, done = "", 0
    for n in steps:
        found = det.update(ids[done:n], stop_terminated=False)
        done = n
        streamed += det.get_next_output_text(finished=found is not None, delta=True)
        if found is not None:
            return det.output_text, streamed, True
    return (
        det.output_text,
        streamed + det.get_next_output_text(finished=True, delta=True),
        False,
    )
