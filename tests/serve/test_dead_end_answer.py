"""A structured output's dead end is answered as the request's error, a 400 naming the output position, not a 500
that OpenAI clients retry (issue 47 item 5; serve/responses.finished_row). The dead end itself (the engine's
side) is tested in tests/backends/vllm/test_grammar_dead_end.py; its error travels in the row as here."""

from types import SimpleNamespace

import pytest

from asymspec_vl.core.errors import GrammarDeadEndError
from asymspec_vl.core.loop import RowOutput
from asymspec_vl.serve.http_errors import GenerationFailedError, status_of
from asymspec_vl.serve.responses import finished_row
from vllm_patches.grammar_dead_end import dead_end_error


def failed_row(error: str) -> RowOutput:
    return RowOutput(token_ids=[7, 8, 9], finish_reason="error", error=error)


def test_a_dead_end_is_a_400_naming_the_position():
    engine = dead_end_error(
        SimpleNamespace(regex="[0-9]Ω"), 3, "none of the shared set", "1 verifier"
    )
    row = failed_row(
        f"the engine finished the request with 'abort': {type(engine).__name__}: {engine}"
    )
    with pytest.raises(GrammarDeadEndError) as e:
        finished_row(row)
    assert status_of(e.value) == 400
    said = str(e.value)
    assert "at output position 3 " in said and "[0-9]Ω" in said, said
    assert "keeps the 3 tokens sent" in said and "is kept" not in said, said


def test_any_other_failed_run_stays_a_500():
    with pytest.raises(GenerationFailedError) as e:
        finished_row(
            failed_row("the engine finished the request with 'abort': KV load failure")
        )
    assert status_of(e.value) == 500
    done = RowOutput(token_ids=[1], finish_reason="stop")
    assert finished_row(done) is done
