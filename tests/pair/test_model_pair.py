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


def test_a_pad_token_past_the_models_rows_pads_with_0():
    """A pad added to the tokenizer without resizing the model has no embedding row: the batch pads with 0."""
    tok = CountingTokenizer()
    tok.pad_token_id = 8
    assert ModelPair(tok, tok, vocab_size=8, eos_ids={5}).pad_id == 0
    tok.pad_token_id = 7
    assert ModelPair(tok, tok, vocab_size=8, eos_ids={5}).pad_id == 7


def test_a_cross_family_pair_stops_at_the_verifiers_answer_end_whatever_its_config(
    real_shapes, tmp_path
):
    """The answer end read from the verifier's chat template stops an answer even when neither model's generation
    config nor the verifier's tokenizer names it (base configs: Llama-3's <|end_of_text|>, Qwen's <|endoftext|>)."""
    import json
    import shutil

    folders = {}
    for role, src, eos in zip(
        ("drafter", "verifier"), real_shapes.pair("real-llama3"), (151643, 128001)
    ):
        folders[role] = tmp_path / role
        shutil.copytree(src, folders[role])
        for name in ("generation_config.json", "config.json"):
            cfg = json.loads((folders[role] / name).read_text())
            cfg["eos_token_id"] = eos
            (folders[role] / name).write_text(json.dumps(cfg))
    # the base Llama-3 tokenizer's EOS too
    tok_cfg = folders["verifier"] / "tokenizer_config.json"
    cfg = json.loads(tok_cfg.read_text())
    cfg["eos_token"] = "<|end_of_text|>"
    tok_cfg.write_text(json.dumps(cfg))
    pair = ModelPair.load(str(folders["drafter"]), str(folders["verifier"]))
    assert pair.vmap.specials["answer_end"][1] == 128009
    assert {128001, 128009} <= pair.eos_ids


def test_stop_ids_off_a_vocabulary_maps_shared_set_are_refused_by_id():
    """Issue 47 item 4: across a map only shared verifier ids are committed, so a stop id off the shared set could
    never end an answer; the pair's own end ids stay (an end alias folds into the shared answer end)."""
    import pytest
    import torch

    from asymspec_vl import AsymSpecConfig
    from asymspec_vl.core.errors import ConfigError
    from asymspec_vl.core.vocab_align import VocabMap

    tok = CountingTokenizer()
    tok.convert_ids_to_tokens = {v: k for k, v in tok.get_vocab().items()}.get
    vmap = VocabMap(
        torch.tensor([0, 1]), torch.tensor([0, 5]), 4, 8
    )  # shared: verifier 0 and 5
    pair = ModelPair(tok, tok, vocab_size=8, eos_ids={1, 5}, vmap=vmap)
    for ok in ((0, 5), (1,)):  # shared, or the pair's own end id
        pair.check_stop_ids(AsymSpecConfig(stop_token_ids=ok))
    with pytest.raises(ConfigError, match=r"holds \[3\] \(\['c'\]\).*2 shared tokens"):
        pair.check_stop_ids(AsymSpecConfig(stop_token_ids=(0, 3, 5)))
    one = ModelPair(
        tok, tok, vocab_size=8, eos_ids={5}
    )  # one vocabulary: every id can be committed
    one.check_stop_ids(AsymSpecConfig(stop_token_ids=(3,)))
    assert one.unshared_ids((0, 1, 3)) == []
