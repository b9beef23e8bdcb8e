"""MathVista's LLM-based answer extraction, run locally: the official cheap rules first, then a local model
(by default the verifier, through transformers, greedy, its chat template) reads a 5-example prompt."""

from __future__ import annotations

import torch

from asymspec_vl.core.errors import PromptTooLongError
from asymspec_vl.pair.defaults import resolve
from asymspec_vl.pair.models import load_causal_lm, resolve_device_dtype

from .extraction import quick_extract

INSTRUCTION = (
    "Each example below shows a question, a model's response to it, and the final answer taken out "
    "of that response, written in the form the question's hint asks for. Do the same for the last "
    "response: write only its extracted answer."
)

_INT = (
    "Hint: Please answer the question requiring an integer answer and provide the final value, e.g., 1, 2, 3, "
    "at the end."
)
_FLOAT1 = (
    "Hint: Please answer the question requiring a floating-point number with one decimal place and provide "
    "the final value, e.g., 1.2, 1.3, 1.4, at the end."
)
_FLOAT2 = (
    "Hint: Please answer the question requiring a floating-point number with two decimal places and provide "
    "the final value, e.g., 1.23, 1.34, 1.45, at the end."
)
_CHOICE = "Hint: Please answer the question and provide the correct option letter, e.g., A, B, C, D, at the end."
_LIST = (
    "Hint: Please answer the question requiring a Python list as an answer and provide the final list, "
    "e.g., [1, 2, 3], [1.2, 1.3, 1.4], at the end."
)

# (query, model response, extracted answer): one example per answer form.
EXAMPLES = [
    (
        f"{_INT}\nQuestion: How many birds are sitting on the fence?",
        "Three birds sit on the left half of the fence and two more on the right half, so 5 birds in all.",
        "5",
    ),
    (
        f"{_FLOAT1}\nQuestion: What is the mean of the bars labelled 2019 and 2020?",
        "The 2019 bar reaches 3.4 and the 2020 bar reaches 4.1. Their mean is (3.4 + 4.1) / 2 = 3.75, "
        "which is 3.8 to one decimal place.",
        "3.8",
    ),
    (
        f"{_FLOAT2}\nQuestion: What fraction of the circle is shaded?",
        "Three of the eight equal slices are shaded: 3/8 = 0.375. Rounded to two decimals the answer is 0.38.",
        "0.38",
    ),
    (
        f"{_CHOICE}\nQuestion: Which shape has the largest area?\nChoices:\n(A) the square\n(B) the circle\n"
        "(C) the triangle\n(D) the rectangle",
        "The circle has radius 3, so its area is about 28.3, more than the square (16), the triangle (12) and "
        "the rectangle (24). The correct option is B.",
        "B",
    ),
    (
        f"{_LIST}\nQuestion: At which x values does the curve cross the x-axis?",
        "Reading the plot, the curve meets the x-axis at x = -2 and again at x = 3, giving [-2, 3].",
        "[-2, 3]",
    ),
]


def extraction_prompt(query: str, response: str) -> str:
    """The instruction, the five examples, then this query + response, ending in "Extracted answer:"."""
    blocks = [INSTRUCTION]
    blocks += [
        f"{q}\n\nModel response: {r}\n\nExtracted answer: {a}" for q, r, a in EXAMPLES
    ]
    blocks.append(
        f"{query.strip()}\n\nModel response: {response.strip()}\n\nExtracted answer:"
    )
    return "\n\n".join(blocks)


def first_line(text: str) -> str:
    """The model's answer: its first non-empty line, without a repeated "Extracted answer:" label."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if line.lower().startswith("extracted answer:"):
        line = line[len("extracted answer:") :].strip()
    return line


class LLMExtractor:
    """Extracts answers with a causal LM: MathVista's cheap rules, else greedy generation on the prompt."""

    def __init__(self, model, tokenizer, name: str = "llm", max_new_tokens: int = 32):
        self.model, self.tokenizer, self.max_new_tokens = (
            model,
            tokenizer,
            max_new_tokens,
        )
        self.name = f"llm:{name}"

    @classmethod
    def from_pretrained(
        cls,
        path: str,
        device: str | None = None,
        dtype="auto",
        trust_remote_code: bool = False,
    ) -> LLMExtractor:
        from transformers import AutoTokenizer  # lazy: loads transformers

        local = resolve("verifier", path)
        dev, dt = resolve_device_dtype(device, dtype)
        tok = AutoTokenizer.from_pretrained(local, trust_remote_code=trust_remote_code)
        return cls(
            load_causal_lm(local, dev, dt, trust_remote_code), tok, name=str(path)
        )

    @classmethod
    def from_pipeline(cls, vl) -> LLMExtractor:
        """Reuse the pipeline's verifier (transformers backend) or load it again by name."""
        model = getattr(vl.backend, "verifier", None)
        if isinstance(model, torch.nn.Module):
            return cls(model, vl.pair.tokenizer, name=str(vl.names["verifier"]))
        return cls.from_pretrained(str(vl.names["verifier"]))

    def chat_ids(self, query: str, response: str) -> list[int]:
        """Token ids of the chat-templated prompt; the response is cut from the front to fit the context."""
        cfg = getattr(self.model.config, "text_config", self.model.config)
        budget = int(cfg.max_position_embeddings) - self.max_new_tokens
        ids = self._encode(query, response)
        resp_ids = self.tokenizer(response, add_special_tokens=False)["input_ids"]
        while len(ids) > budget and resp_ids:
            resp_ids = resp_ids[
                len(ids) - budget + 8 :
            ]  # keep the end, where the answer is
            response = "..." + self.tokenizer.decode(resp_ids)
            ids = self._encode(query, response)
        if len(ids) > budget:
            raise PromptTooLongError(
                f"the extraction prompt has {len(ids)} tokens without the response; the "
                f"extraction model's budget is {budget}"
            )
        return ids

    def _encode(self, query: str, response: str) -> list[int]:
        messages = [{"role": "user", "content": extraction_prompt(query, response)}]
        text = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, enable_thinking=False
        )
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    @torch.inference_mode()
    def generate(self, query: str, response: str) -> str:
        ids = torch.tensor(
            [self.chat_ids(query, response)], device=self.model.device
        )  # [1, L]
        out = self.model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=self.max_new_tokens,
            top_p=None,
            top_k=None,
            temperature=None,
            pad_token_id=self.tokenizer.pad_token_id,
        )  # [1, L + new]
        return first_line(
            self.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
        )

    def extract(self, response: str, facts: dict, query: str) -> str:
        quick = quick_extract(response, facts)
        return quick if quick is not None else self.generate(query, response)
