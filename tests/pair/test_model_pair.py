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
