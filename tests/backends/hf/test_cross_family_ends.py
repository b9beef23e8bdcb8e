"""A verifier of another vocabulary ends its answers on the transformers backend (inputs/vocab_map.py's answer end,
core/vocab_align.py's fold): a Qwen3-VL drafter with a Mistral-vocabulary verifier (Tekken and SentencePiece v3,
the real tokenizers and rows) whose every position ends with </s> finishes by "stop" after min_tokens, every
method greedy and sampled (before issue 43 </s> was outside the shared set: every answer ran to its budget), and a
Llama-3 verifier that ends with <|end_of_text|> (an EOS of its generation config, not its template's answer end)
stops on <|eot_id|>, its end mass folded there."""

import pytest
from ending_verifier import write_ending_verifier
from helpers import ON_TEST_DEVICE, random_request

from asymspec_vl import AsymSpecConfig, AsymSpecVL

pytestmark = [pytest.mark.usefixtures("one_torch_thread")]
HOLD = 3  # min_tokens: the answer's words before its end
# family -> (the token its verifier ends every position with, the answer end the pair stops on)
ENDING = {
    "mistral-tekken": (2, 2),
    "mistral-sp": (2, 2),
    "llama3": (128001, 128009),
}
GREEDY = AsymSpecConfig(K=2, max_new_tokens=12, min_tokens=HOLD)
SAMPLED = AsymSpecConfig(
    K=2, max_new_tokens=12, min_tokens=HOLD, temperature=0.8, seed=1
)
# every method on Tekken, greedy and sampled; AsymSpec and sampled SD on the others
CASES = [
    ("mistral-tekken", m, c)
    for m in ("asymspec", "floor", "sd", "scd")
    for c in (GREEDY, SAMPLED)
] + [
    (f, m, c)
    for f in ("mistral-sp", "llama3")
    for m, c in (("asymspec", GREEDY), ("sd", SAMPLED))
]


@pytest.fixture(scope="module")
def ending_pairs(real_shapes, tmp_path_factory):
    """family -> the pipeline of the Qwen3-VL drafter and the family's ending verifier (each loaded on first ask)."""
    loaded = {}

    def pipeline(family: str) -> AsymSpecVL:
        if family not in loaded:
            verifier = write_ending_verifier(
                real_shapes.model_dir(family, "verifier", 1),
                tmp_path_factory.mktemp("ending") / family,
                ENDING[family][0],
            )
            loaded[family] = AsymSpecVL.from_pretrained(
                drafter=str(real_shapes.model_dir("qwen3", "drafter")),
                verifier=str(verifier),
                **ON_TEST_DEVICE,
            )
        return loaded[family]

    return pipeline


@pytest.mark.parametrize(
    "family, method, cfg",
    CASES,
    ids=[f"{f}-{m}-{'sampled' if c.samples else 'greedy'}" for f, m, c in CASES],
)
def test_the_verifier_ends_its_answer(ending_pairs, family, method, cfg):
    vl, answer_end = ending_pairs(family), ENDING[family][1]
    assert vl.pair.vmap.specials["answer_end"] == (151645, answer_end)
    results = vl.generate_batch([random_request(0), random_request(1)], method, cfg)
    for r in results:
        assert (r.finish_reason, len(r.token_ids)) == ("stop", HOLD + 1), family
        assert r.token_ids[-1] == answer_end
