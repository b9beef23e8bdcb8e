"""The answer's end across a vocabulary map (inputs/vocab_map.py): read from each tokenizer's chat template and
paired first, the verifier's other EOS ids folded into it, the role table only without a template, and ids past a
model's logit rows kept out of the map. Hand-built tokenizers carrying each family's special ids and template."""

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from asymspec_vl.core.errors import VocabularyMismatchError
from asymspec_vl.core.vocab_align import VocabMap
from asymspec_vl.inputs.vocab_map import answer_end, build_vocab_map, describe

WORDS = [f"w{i}" for i in range(300)]
CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Mistral-7B-Instruct-v0.3's shape (SentencePiece v3): [/INST] closes the user's turn, </s> the assistant's.
MISTRAL = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}{{ '[INST] ' + m['content'] + ' [/INST]' }}"
    "{% else %}{{ ' ' + m['content'] | trim + eos_token }}{% endif %}{% endfor %}"
)
# Gemma 3's chat template (google/gemma-3-*-it tokenizer_config.json; the Hub is not reachable offline: transcribed).
GEMMA = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""


def tokenizer(
    vocab: dict[str, int], specials: list[str], template: str | None, **roles
) -> PreTrainedTokenizerFast:
    """A word-level tokenizer with these ids, `specials` marked special, the roles (eos_token=..., ...) and template."""
    tok = Tokenizer(models.WordLevel(vocab, unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    out = PreTrainedTokenizerFast(
        tokenizer_object=tok, additional_special_tokens=specials, **roles
    )
    out.chat_template = template
    return out


def numbered(specials: dict[int, str], size: int) -> dict[str, int]:
    """Specials at their ids, WORDS (then fillers) at the other ids below `size`."""
    fill = iter(WORDS + [f"x{i}" for i in range(size)])
    return {(specials[i] if i in specials else next(fill)): i for i in range(size)}


def qwen(template: str | None = CHATML):
    """Qwen's specials: <|endoftext|> 0 (pad, generation-config EOS), <|im_start|> 1, <|im_end|> 2 (EOS)."""
    vocab = numbered({0: "<|endoftext|>", 1: "<|im_start|>", 2: "<|im_end|>"}, 320)
    return tokenizer(
        vocab,
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        template,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )


QWEN_EOS = {2, 0}  # Qwen3(-VL)'s generation config: <|im_end|>, <|endoftext|>


def mistral(template: str | None = MISTRAL, size: int = 320):
    vocab = numbered({0: "<unk>", 1: "<s>", 2: "</s>", 3: "[INST]", 4: "[/INST]"}, size)
    return tokenizer(
        vocab,
        ["[INST]", "[/INST]"],
        template,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
    )


def gemma():
    """Gemma's special ids: <pad> 0, <eos> 1, <bos> 2, <unk> 3, <start_of_turn> 105, <end_of_turn> 106."""
    specials = {
        0: "<pad>",
        1: "<eos>",
        2: "<bos>",
        3: "<unk>",
        105: "<start_of_turn>",
        106: "<end_of_turn>",
    }
    return tokenizer(
        numbered(specials, 420),
        ["<start_of_turn>", "<end_of_turn>"],
        GEMMA,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
    )


def test_a_mistral_verifier_ends_its_answer_with_eos_not_with_inst():
    """Mistral's template closes the assistant's turn with </s>; [/INST] closes the user's and stays off the map."""
    d, v = qwen(), mistral()
    vmap = build_vocab_map(d, v, drafter_eos=QWEN_EOS, verifier_eos={2})
    assert vmap.specials["answer_end"] == (2, 2)  # <|im_end|> -> </s>
    shared = set(vmap.verifier_ids.tolist())
    assert 2 in shared and 4 not in shared  # </s> in, [/INST] out
    assert vmap.end_aliases == ()  # Mistral's one EOS is its answer end
    assert "answer end <|im_end|> 2 -> </s> 2" in describe(vmap)
    # the drafter's other EOS stays off the map, and the line says so
    assert 0 not in set(vmap.drafter_ids.tolist())
    assert "the drafter's EOS <|endoftext|> 0 stay off the map" in describe(vmap)


def test_a_gemma_verifier_ends_with_end_of_turn_and_its_eos_folds_into_it():
    d, v = qwen(), gemma()
    vmap = build_vocab_map(d, v, drafter_eos=QWEN_EOS, verifier_eos={1, 106})
    assert vmap.specials["answer_end"] == (2, 106)  # <|im_end|> -> <end_of_turn>
    assert vmap.end_aliases == (1,)  # <eos>: its mass counts as <end_of_turn>'s
    assert 1 not in set(vmap.verifier_ids.tolist())
    assert vmap.specials["turn_start"] == (1, 105)
    assert "the verifier's EOS <eos> 1 end its answer as <end_of_turn> 106" in describe(
        vmap
    )


def test_without_a_template_the_role_table_gives_the_end_and_says_so():
    """No chat template: the family's assistant-turn end from the table, else the EOS (never [/INST])."""
    d, v = qwen(), mistral(template=None)
    vmap = build_vocab_map(d, v, "Qwen", "Mistral", verifier_eos={2})
    assert vmap.specials["answer_end"] == (2, 2)
    assert (
        "Mistral has no chat template: its answer end </s> 2 is the role table's"
        in (describe(vmap))
    )
    d = qwen(template=None)
    assert answer_end(d, "Qwen", len(d)) == (
        2,
        "Qwen has no chat template: its answer end <|im_end|> 2 is the role table's",
    )


def llama3_base():
    """Meta-Llama-3-8B (base)'s shape: no chat template, EOS <|end_of_text|> 1 (its generation config's only EOS),
    the turn end <|eot_id|> 4 that its fine-tunes' templates (and Llama-3-Instruct's) close each answer with."""
    specials = {
        0: "<|begin_of_text|>",
        1: "<|end_of_text|>",
        2: "<|start_header_id|>",
        3: "<|end_header_id|>",
        4: "<|eot_id|>",
    }
    return tokenizer(
        numbered(specials, 320),
        list(specials.values()),
        None,
        bos_token="<|begin_of_text|>",
        eos_token="<|end_of_text|>",
    )


def test_without_a_template_the_turn_end_is_paired_before_an_eos_that_differs():
    """A verifier whose EOS is not its turn end (base Llama-3 configs): the role table's <|eot_id|> is the answer
    end, paired with the drafter's <|im_end|>, and the EOS folds into it; pairing the EOS instead would leave the
    token that ends a chat answer off the map."""
    vmap = build_vocab_map(qwen(), llama3_base(), "Qwen", "Llama-3", verifier_eos={1})
    assert vmap.specials["answer_end"] == (2, 4)  # <|im_end|> -> <|eot_id|>
    assert 4 in set(vmap.verifier_ids.tolist())
    assert vmap.end_aliases == (1,)  # <|end_of_text|> ends the answer as <|eot_id|>
    assert (
        "Llama-3 has no chat template: its answer end <|eot_id|> 4 is the role table's"
        in (describe(vmap))
    )


def test_one_tokenizer_with_two_row_counts_gets_a_map_not_the_identity():
    """Qwen2.5-VL 3B and 7B share one tokenizer but have 151,936 and 152,064 logit rows (both past the tokenizer's
    151,665 ids): the identity map would give the drafter rows it does not have. Here 336 and 384 rows over one
    320-id tokenizer: every token id pairs with itself, each model keeps its own row count."""
    tok = qwen()
    vmap = build_vocab_map(tok, tok, drafter_size=336, verifier_size=384)
    assert not vmap.identity
    assert (vmap.drafter_size, vmap.verifier_size) == (336, 384)
    assert torch.equal(vmap.drafter_ids, vmap.verifier_ids)
    assert vmap.verifier_ids.tolist() == list(range(320))
    assert vmap.specials["answer_end"] == (2, 2)  # <|im_end|>
    _, _, d2v, v2d = vmap.to("cpu")
    assert d2v.shape == (336,) and v2d.shape == (384,)


def test_a_template_that_cannot_render_the_exchange_falls_back_with_its_reason():
    v = mistral(template="{{ raise_exception('system message required') }}")
    end, note = answer_end(v, "Mistral", len(v), {2})
    assert end == 2 and "cannot render a user + assistant exchange" in note
    assert "system message required" in note


def test_a_template_that_ends_the_answer_with_no_special_token_is_a_typed_error():
    plain = "{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\\n' }}{% endfor %}"
    v = mistral(template=plain)
    with pytest.raises(
        VocabularyMismatchError,
        match=r"the chat template of Mistral closes the assistant's turn with no special token",
    ):
        build_vocab_map(qwen(), v, "Qwen", "Mistral")


def test_a_pad_token_past_the_rows_never_enters_the_map():
    """A pad added to the tokenizer without resizing the model (id == the model's rows): today an IndexError."""
    d, v = qwen(), mistral()
    v.add_special_tokens({"pad_token": "<pad>"})
    rows = len(v) - 1
    assert v.pad_token_id == rows
    d.pad_token = (
        "<|endoftext|>"  # the drafter has a pad: the role table would pair the two
    )
    vmap = build_vocab_map(d, v, verifier_size=rows, verifier_eos={2})
    assert int(vmap.verifier_ids.max()) < rows and "pad" not in vmap.specials
    _, _, d2v, v2d = vmap.to("cpu")  # the map's tables build
    assert v2d.shape == (rows,) and int(d2v[2]) == 2


def test_an_answer_end_past_the_rows_is_a_typed_error_naming_it():
    v = mistral(template=CHATML.replace("<|im_end|>", "<|end|>"))
    v.add_special_tokens({"additional_special_tokens": ["<|end|>"]})
    rows = len(v) - 1
    with pytest.raises(
        VocabularyMismatchError,
        match=rf"Mistral closes the assistant's turn with <\|end\|> {rows}, but the model has {rows} logit rows",
    ):
        build_vocab_map(qwen(), v, "Qwen", "Mistral", verifier_size=rows)


def test_a_map_naming_ids_past_the_rows_is_a_typed_error():
    with pytest.raises(
        VocabularyMismatchError,
        match=r"verifier ids \[8\] the verifier has no logit row",
    ):
        VocabMap(torch.tensor([0, 1]), torch.tensor([3, 8]), 4, 8)
    with pytest.raises(VocabularyMismatchError, match="end aliases"):
        VocabMap(
            torch.tensor([0, 1]),
            torch.tensor([3, 5]),
            4,
            8,
            specials={"answer_end": (1, 5)},
            end_aliases=(3,),  # shared: no alias
        )


# The real families (asymspec_vl/toy/real_vocab.py): each template's answer end, and the verifier's other EOS ids.
REAL_ENDS = {
    "qwen3": ("<|im_end|>", 151645),
    "llama3": ("<|eot_id|>", 128009),
    "mistral-tekken": ("</s>", 2),
    "mistral-sp": ("</s>", 2),
}
REAL_ALIASES = {"llama3": (128001, 128008), "mistral-tekken": (), "mistral-sp": ()}


def generation_eos(folder) -> set[int]:
    import json

    eos = json.loads((folder / "generation_config.json").read_text())["eos_token_id"]
    return set(eos) if isinstance(eos, list) else {eos}


def real_map(real_shapes, family: str, verifier=None, rows: int | None = None):
    """Qwen3(-VL)'s tokenizer and generation config (the drafter) x the family's, at the real row counts."""
    from asymspec_vl.toy.real_vocab import GENERATION, ROWS

    return build_vocab_map(
        real_shapes.tokenizer("qwen3"),
        verifier or real_shapes.tokenizer(family),
        "Qwen3-VL",
        family,
        ROWS["qwen3"],
        rows or ROWS[family],
        set(GENERATION["qwen3-vl"]["eos_token_id"]),
        generation_eos(real_shapes.tokenizer_dir(family)),
    )


@pytest.mark.parametrize("family", sorted(REAL_ENDS))
def test_each_real_template_gives_its_answer_end(real_shapes, family):
    from asymspec_vl.toy.real_vocab import ROWS

    tok = real_shapes.tokenizer(family)
    name, end = REAL_ENDS[family]
    assert tok.convert_ids_to_tokens(end) == name
    assert answer_end(tok, family, ROWS[family]) == (end, None)


def test_qwen3_vl_template_gives_im_end(real_shapes):
    from transformers import AutoTokenizer

    from asymspec_vl.toy.real_templates import QWEN3_VL_CHAT_TEMPLATE
    from asymspec_vl.toy.real_vocab import ROWS

    drafter = AutoTokenizer.from_pretrained(real_shapes.tokenizer_dir("qwen3"))
    drafter.chat_template = QWEN3_VL_CHAT_TEMPLATE
    assert answer_end(drafter, "Qwen3-VL", ROWS["qwen3"]) == (151645, None)


@pytest.mark.parametrize("family", sorted(REAL_ALIASES))
def test_real_pairs_pair_their_answer_ends_and_fold_every_other_eos(
    real_shapes, family
):
    """Qwen3-VL x Llama-3 / Tekken / SentencePiece v3: <|im_end|> pairs with the verifier's template end (before
    issue 43: [/INST] for both Mistral vocabularies, </s> never shared), every EOS of the verifier's generation
    config is the answer end or folds into it, and [/INST] (the user's turn end) is off the map."""
    vmap = real_map(real_shapes, family)
    _, end = REAL_ENDS[family]
    shared = set(vmap.verifier_ids.tolist())
    assert vmap.specials["answer_end"] == (151645, end)
    assert vmap.end_aliases == REAL_ALIASES[family]
    assert generation_eos(real_shapes.tokenizer_dir(family)) == {
        end,
        *vmap.end_aliases,
    }
    assert end in shared and not shared & set(vmap.end_aliases)
    inst_end = real_shapes.tokenizer(family).convert_tokens_to_ids("[/INST]")
    if family.startswith("mistral"):
        assert inst_end == 4 and 4 not in shared
    # the drafter's <|endoftext|> (Qwen3-VL's second EOS) stays off the map, named
    assert 151643 not in set(vmap.drafter_ids.tolist())
    assert "the drafter's EOS <|endoftext|> 151643 stay off the map" in describe(vmap)


def test_a_llama3_tokenizer_with_a_pad_past_its_rows_builds_its_map(real_shapes):
    """tokenizer.add_special_tokens({"pad_token": "<pad>"}) without resizing: <pad> is id 128256, past the
    model's 128,256 rows (before issue 43: IndexError in VocabMap.to). It never enters the map."""
    from transformers import AutoTokenizer

    llama = AutoTokenizer.from_pretrained(real_shapes.tokenizer_dir("llama3"))
    llama.add_special_tokens({"pad_token": "<pad>"})
    assert llama.pad_token_id == 128256 == len(llama) - 1
    vmap = real_map(real_shapes, "llama3", verifier=llama, rows=128256)
    _, _, d2v, v2d = vmap.to("cpu")
    assert v2d.shape == (128256,) and int(vmap.verifier_ids.max()) < 128256
    assert vmap.specials["answer_end"] == (151645, 128009)
    assert "pad" not in vmap.specials
