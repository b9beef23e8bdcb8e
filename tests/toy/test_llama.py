"""The embedded cross-family pair: the toy drafter (tiny Qwen3-VL) with the toy Llama verifier (its own
SentencePiece-style tokenizer and Llama-3 chat template, toy/llama.py). Its vocabulary shares only part of the
drafter's (digits and words included, every held-out answer spelled in shared tokens), `embedded-llama` resolves
to it, `toy train --verifier-family llama` writes it, and on held-out questions AsymSpec beats the Floor by
committing shared tokens only."""

import hashlib
import json

import pytest
from helpers import ON_TEST_DEVICE

from asymspec_vl.toy import PAIR_DIR, world
from asymspec_vl.toy.train import LLAMA_RECIPE, ToyTrainConfig, train_family_verifier

N = 30  # held-out questions: 10 of each type
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def tokenizers():
    from transformers import AutoTokenizer

    return (
        AutoTokenizer.from_pretrained(PAIR_DIR / "drafter"),
        AutoTokenizer.from_pretrained(PAIR_DIR / "verifier-llama"),
    )


@pytest.fixture(scope="module")
def vmap(tokenizers):
    from asymspec_vl.inputs.vocab_map import build_vocab_map

    return build_vocab_map(*tokenizers)


def test_the_vocabularies_share_only_part_digits_and_words_included(tokenizers, vmap):
    d_tok, v_tok = tokenizers
    assert not vmap.identity
    assert (
        0.4 < vmap.share()[0] < 0.8 and 0.7 < vmap.share()[1] < 0.95
    )  # part of each vocabulary
    _, _, d2v, v2d = vmap.to("cpu")
    for text in [str(k) for k in range(10)] + [
        " the",
        " answer",
        " red",
        " circle",
        " +",
        " ×",
    ]:
        d_ids = d_tok(text, add_special_tokens=False)["input_ids"]
        v_ids = v_tok(text, add_special_tokens=False)["input_ids"]
        assert len(d_ids) == len(v_ids) == 1, (
            text
        )  # one token in each vocabulary, and the same string
        assert int(d2v[d_ids[0]]) == v_ids[0] and int(v2d[v_ids[0]]) == d_ids[0], text
    unshared = [t for t, i in v_tok.get_vocab().items() if int(v2d[i]) < 0]
    assert (
        "▁circle?" in unshared
    )  # Llama-2-style pieces keep punctuation on the word: no Qwen counterpart
    assert vmap.specials["answer_end"] == (
        d_tok.convert_tokens_to_ids("<|im_end|>"),
        v_tok.convert_tokens_to_ids("<|eot_id|>"),
    )


def test_every_heldout_answer_is_spelled_in_shared_tokens(tokenizers, vmap):
    """The verifier's own tokenization of every answer is committable across the map (else the pair could not
    say it)."""
    _, v_tok = tokenizers
    v2d = vmap.to("cpu").v2d
    for ex in world.heldout(60):
        ids = v_tok(ex.answer, add_special_tokens=False)["input_ids"]
        assert all(int(v2d[i]) >= 0 for i in ids), ex.answer


def test_embedded_llama_resolves_to_the_shipped_cross_family_pair():
    from asymspec_vl.pair.defaults import embedded_models, resolve
    from asymspec_vl.pair.model_source import pair_names

    assert embedded_models("embedded-llama") == {
        "drafter": str(PAIR_DIR / "drafter"),
        "verifier": str(PAIR_DIR / "verifier-llama"),
        "text_drafter": None,
    }
    assert resolve("verifier", "embedded-llama") == str(PAIR_DIR / "verifier-llama")
    assert resolve("drafter", "embedded") == str(PAIR_DIR / "drafter")
    assert resolve("verifier", "embedded") == str(
        PAIR_DIR / "verifier"
    )  # the same-family pair is unchanged
    assert pair_names(None, "embedded-llama", "D", "V") == (
        "embedded",
        "embedded-llama",
    )
    assert pair_names("embedded", None, "D", "V") == ("embedded", "embedded")


def test_the_shipped_files_are_the_trained_ones_and_the_drafter_is_unchanged():
    manifest = json.loads((PAIR_DIR / "llama_manifest.json").read_text())
    pair = json.loads((PAIR_DIR / "manifest.json").read_text())
    for name in ("model.safetensors", "tokenizer.json"):
        assert manifest["sha256"][f"verifier-llama/{name}"] == _sha(
            PAIR_DIR / "verifier-llama" / name
        )
    assert (
        manifest["sha256"]["drafter/model.safetensors"]
        == pair["sha256"]["drafter/model.safetensors"]
        == _sha(PAIR_DIR / "drafter" / "model.safetensors")
    )
    cfg = ToyTrainConfig.from_dict(manifest["config"])
    assert (cfg.vocab_size, cfg.verifier_steps, cfg.verifier_sizes) == (
        LLAMA_RECIPE["vocab_size"],
        LLAMA_RECIPE["verifier_steps"],
        LLAMA_RECIPE["verifier_sizes"],
    )
    assert (
        manifest["heldout"]["asymspec-K2-b1"]["Overall"]
        >= manifest["heldout"]["floor"]["Overall"] + 50
    )
    config = json.loads((PAIR_DIR / "verifier-llama" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]


@pytest.fixture(scope="module")
def llama_vl():
    from asymspec_vl import AsymSpecVL

    return AsymSpecVL.from_pretrained(
        verifier="embedded-llama", **ON_TEST_DEVICE, backend="hf"
    )


def test_asymspec_beats_the_floor_committing_shared_tokens_only(llama_vl):
    from asymspec_vl.evals.toy.eval import VARIANTS, request_of

    examples = world.heldout(N)
    reqs = [request_of(e) for e in examples]
    assert not llama_vl.pair.vmap.identity and llama_vl.names["verifier"] == str(
        PAIR_DIR / "verifier-llama"
    )
    shared = set(llama_vl.pair.vmap.verifier_ids.tolist())
    accuracy = {}
    for key in ("floor", "drafter", "asymspec-K2-b1"):
        res = llama_vl.generate_batch(
            reqs, VARIANTS[key].method, VARIANTS[key].config()
        )
        assert all(set(r.token_ids) <= shared for r in res), (
            key
        )  # verifier ids, all in the shared set
        accuracy[key] = (
            100.0 * sum(world.is_correct(r.text, e) for e, r in zip(examples, res)) / N
        )
    assert accuracy["floor"] <= 25.0  # the caption has no digits
    assert accuracy["asymspec-K2-b1"] >= accuracy["floor"] + 50.0
    assert (
        accuracy["asymspec-K2-b1"] >= accuracy["drafter"] + 10.0
    )  # the Llama verifier's arithmetic, across the map


def test_the_eval_table_header_names_the_shared_set(llama_vl):
    from asymspec_vl.evals.toy.cli import title

    head = title(llama_vl, 9, 3)
    size = llama_vl.pair.vmap.size
    assert (
        head.startswith("Toy world, held-out n=9 (hf, batch 3); cross-family: ")
        and f"{size} shared tokens" in head
    )
    assert (
        "of the drafter's 426" in head
        and f"of the verifier's {llama_vl.pair.vmap.verifier_size}" in head
    )
    from types import SimpleNamespace

    from asymspec_vl.core.vocab_align import VocabMap

    same = SimpleNamespace(
        names={"backend": "hf"},
        pair=SimpleNamespace(vmap=VocabMap.same_vocabulary(426)),
    )
    assert (
        title(same, 9, 3) == "Toy world, held-out n=9 (hf, batch 3)"
    )  # a same-family table's header as before


def test_train_family_verifier_writes_a_loadable_llama_verifier(tmp_path):
    from asymspec_vl.evals.toy.eval import request_of

    from asymspec_vl import AsymSpecConfig, AsymSpecVL

    cfg = ToyTrainConfig(
        verifier_steps=3,
        verifier_batch=4,
        per_scene=2,
        drafter_batch=4,
        eval_n=0,
        **{k: v for k, v in LLAMA_RECIPE.items() if k != "verifier_steps"},
    )
    manifest = train_family_verifier(tmp_path, cfg, "llama", PAIR_DIR / "drafter")
    assert json.loads((tmp_path / "llama_manifest.json").read_text()) == manifest
    assert manifest["vocab_map"]["shared"] < manifest["vocab_size"]
    assert {
        json.loads(line)["stage"]
        for line in (tmp_path / "llama_train_log.jsonl").read_text().splitlines()
    } == {"verifier"}
    assert not (tmp_path / "verifier-llama_log.jsonl").exists()
    # the tokenizer files are the shipped ones bit for bit (the same corpus and vocabulary size; only the steps
    # differ): `toy train --verifier-family llama` reproduces them
    shipped = json.loads((PAIR_DIR / "llama_manifest.json").read_text())
    assert (
        manifest["sha256"]["verifier-llama/tokenizer.json"]
        == shipped["sha256"]["verifier-llama/tokenizer.json"]
    )
    for name in TOKENIZER_FILES:
        assert (tmp_path / "verifier-llama" / name).read_bytes() == (
            PAIR_DIR / "verifier-llama" / name
        ).read_bytes(), name
    vl = AsymSpecVL.from_pretrained(
        drafter=str(PAIR_DIR / "drafter"),
        verifier=str(tmp_path / "verifier-llama"),
        **ON_TEST_DEVICE,
    )
    assert type(vl.backend.verifier).__name__ == "LlamaForCausalLM"
    res = vl.generate_batch(
        [request_of(world.heldout(1)[0])], "asymspec", AsymSpecConfig(max_new_tokens=4)
    )[0]
    assert 1 <= len(res.token_ids) <= 4


def test_the_qwen3_family_is_trained_with_the_pair():
    from asymspec_vl.core.errors import ConfigError
    from asymspec_vl.toy.train import verifier_folder

    with pytest.raises(ConfigError, match="train_pair"):
        train_family_verifier("unused", ToyTrainConfig(), "qwen3", PAIR_DIR / "drafter")
    with pytest.raises(ConfigError, match="gemma"):
        verifier_folder("gemma")


def test_verifier_batches_end_each_answer_with_the_llama_turn_end(tokenizers):
    """The verifier's training rows: x_comp in Llama-3's template, each answer's label ending in <|eot_id|>."""
    from asymspec_vl.toy.batches import Encoder, verifier_batch

    _, v_tok = tokenizers
    eot = v_tok.convert_tokens_to_ids("<|eot_id|>")
    for step in range(4):  # toy questions and arithmetic exercises (curriculum 0.5)
        batch = verifier_batch(Encoder(v_tok), 0, step, 4, 2, 0.5)
        for ids, labels in zip(batch.input_ids.tolist(), batch.labels.tolist()):
            targets = [t for t in labels if t != -100]
            assert targets[-1] == eot and eot not in targets[:-1]
            assert v_tok.decode(targets[:-1]) in v_tok.decode(ids)
            assert ids[:2] == v_tok.convert_tokens_to_ids(
                ["<|begin_of_text|>", "<|start_header_id|>"]
            )


# toy/llama.py's builders on a small corpus and tiny widths: the tokenizer's pieces, specials and chat template, the
# model's config, and the folder read back by transformers' Auto classes.
SMALL = dict(
    hidden=32,
    layers=1,
    heads=2,
    kv_heads=1,
    head_dim=16,
    intermediate=64,
    max_position=256,
)
CORPUS = [f"What is {i} × {i + 3}? The answer is {i * (i + 3)}." for i in range(40)] + [
    "the red circle is left of the blue square"
] * 5


@pytest.fixture(scope="module")
def small_llama_tokenizer():
    from asymspec_vl.toy.llama import train_llama_tokenizer

    return train_llama_tokenizer(CORPUS, vocab_size=120)


def test_the_llama_tokenizer_reads_spaces_as_the_sentencepiece_mark_and_digits_one_by_one(
    small_llama_tokenizer,
):
    from asymspec_vl.toy.llama import LLAMA_SPECIAL_TOKENS, SPACE

    tok = small_llama_tokenizer
    assert len(tok) == 120
    assert (
        tok.convert_ids_to_tokens(list(range(len(LLAMA_SPECIAL_TOKENS))))
        == LLAMA_SPECIAL_TOKENS
    )
    assert (tok.bos_token, tok.eos_token, tok.pad_token, tok.unk_token) == (
        "<|begin_of_text|>",
        "<|eot_id|>",
        "<|finetune_right_pad_id|>",
        "<unk>",
    )
    pieces = tok.tokenize("The answer is 126.")
    assert pieces == ["The", f"{SPACE}answer", f"{SPACE}is", SPACE, "1", "2", "6", "."]
    backend = (
        tok.backend_tokenizer
    )  # the pre-tokenizer bounds every merge: a number is never one piece
    words = backend.pre_tokenizer.pre_tokenize_str(
        backend.normalizer.normalize_str("is 126.")
    )
    assert [w for w, _ in words] == ["is", SPACE, "1", "2", "6", "."]
    for text in (
        "What is 9 × 14? The answer is 126.",
        "a\nb ~ {x}",
        " the answer",  # a leading "▁" decodes to a space (Llama-2's decoder without its Strip)
    ):  # every character known, round trip
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.unk_token_id not in ids and tok.decode(ids) == text


def test_the_llama_tokenizer_carries_llama_3s_chat_template(small_llama_tokenizer):
    tok = small_llama_tokenizer
    chat = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [{"type": "image"}, {"type": "text", "text": "What is 2 × 3?"}],
        },
    ]
    assert tok.apply_chat_template(
        chat, tokenize=False, add_generation_prompt=True
    ) == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2 × 3?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    ids = tok.apply_chat_template(chat[1:], tokenize=True, add_generation_prompt=False)
    assert (
        ids[0] == tok.bos_token_id and ids[-1] == tok.eos_token_id
    )  # a turn ends at EOS


def test_llama_model_takes_the_sizes_and_the_tokenizers_ids(small_llama_tokenizer):
    import torch

    from asymspec_vl.toy.llama import llama_model
    from asymspec_vl.toy.tiny import TinySizes

    tok, sizes = small_llama_tokenizer, TinySizes(**SMALL)
    model = llama_model(tok, sizes, seed=1)
    c = model.config
    assert type(model).__name__ == "LlamaForCausalLM"
    assert (c.vocab_size, c.hidden_size, c.intermediate_size, c.num_hidden_layers) == (
        120,
        32,
        64,
        1,
    )
    assert (
        c.num_attention_heads,
        c.num_key_value_heads,
        c.head_dim,
        c.max_position_embeddings,
    ) == (2, 1, 16, 256)
    assert (c.bos_token_id, c.eos_token_id, c.pad_token_id) == (
        tok.bos_token_id,
        tok.eos_token_id,
        tok.pad_token_id,
    )
    assert (
        c.tie_word_embeddings
        and model.lm_head.weight is model.model.embed_tokens.weight
    )
    assert c.rope_theta == 500_000.0
    logits = model(torch.tensor([[1, 5, 9]])).logits
    assert logits.shape == (1, 3, 120)
    again, other = llama_model(tok, sizes, seed=1), llama_model(tok, sizes, seed=2)
    first = model.model.layers[0].mlp.up_proj.weight
    assert torch.equal(first, again.model.layers[0].mlp.up_proj.weight)  # seeded
    assert not torch.equal(first, other.model.layers[0].mlp.up_proj.weight)


def test_write_llama_model_is_read_back_by_transformers(
    small_llama_tokenizer, tmp_path
):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from asymspec_vl.toy.llama import llama_model, write_llama_model
    from asymspec_vl.toy.tiny import TinySizes

    tok, sizes = small_llama_tokenizer, TinySizes(**SMALL)
    trained = llama_model(tok, sizes, seed=5)
    with torch.no_grad():
        trained.model.norm.weight.fill_(
            0.5
        )  # "trained": not what a fresh seed-0 model would hold
    for folder, given in (("random", None), ("trained", trained)):
        out = write_llama_model(tmp_path / folder, tok, sizes, seed=0, model=given)
        assert out == tmp_path / folder
        back = AutoModelForCausalLM.from_pretrained(out)
        expected = given if given is not None else llama_model(tok, sizes, seed=0)
        ids = torch.tensor([[1, 7, 30, 99]])
        assert torch.allclose(back(ids).logits, expected(ids).logits, atol=1e-5)
        back_tok = AutoTokenizer.from_pretrained(out)
        text = "What is 9 × 14?"
        assert back_tok(text)["input_ids"] == tok(text)["input_ids"]
        assert (
            back_tok.chat_template == tok.chat_template
            and back_tok.eos_token == "<|eot_id|>"
        )
