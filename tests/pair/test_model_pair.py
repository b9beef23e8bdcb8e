"""ModelPair's banned ids (pair/model_pair.py): read from the verifier's tokenizer once, not per request (get_vocab
copies the whole vocabulary), and each caller gets its own list."""

from asymspec_vl.pair.model_pair import ModelPair


class CountingTokenizer:
    """A tokenizer of 6 tokens (two of them structural) that counts its get_vocab calls."""

    pad_token_id = 0

    def __init__(self):
        self.calls = 0

    def get_vocab(self) -> dict[str, int]:
        self.calls += 1
        return {"a": 0, "b": 1, "<|image_pad|>": 2, "c": 3, "<think>": 4, "d": 5}

    def __len__(self) -> int:
        return 6


def test_banned_ids_read_the_tokenizer_once():
    tok = CountingTokenizer()
    pair = ModelPair(tok, tok, vocab_size=8, eos_ids={5})
    first = pair.banned_ids()
    assert first == [
        2,
        4,
        6,
        7,
    ]  # the structural token, the thinking marker, the lm_head's padding rows
    first.append(99)  # a caller's list is its own
    assert [pair.banned_ids() for _ in range(3)] == [[2, 4, 6, 7]] * 3
    assert pair.banned_mask("cpu").nonzero().flatten().tolist() == [2, 4, 6, 7]
    assert tok.calls == 1
