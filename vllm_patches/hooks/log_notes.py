"""vLLM's log lines that are untrue of an asymspec engine, replaced by what is true, said once per process.

vLLM's build_logitsprocs (vllm/v1/sample/logits_processor/__init__.py, called in GPUModelRunner.__init__) warns
"min_p and logit_bias parameters won't work with speculative decoding." whenever a speculative config is set. On an
asymspec engine min_p is served: each request samples by its method's rule, which applies min_p
(vllm_patches/sampler.py); logit_bias is refused (config_patch.validate_spec_decode; the server names it)."""

from __future__ import annotations

import logging
from contextlib import contextmanager

VLLM_LOGGER = (
    "vllm.v1.sample.logits_processor"  # init_logger(__name__) of the module that warns
)
VLLM_MIN_P_LINE = "min_p and logit_bias parameters won't work with speculative decoding"
OUR_MIN_P_LINE = (
    "asymspec engine: min_p is served (each request's method samples with it, vllm_patches/sampler.py); "
    "logit_bias is refused per request"
)

_said: set[str] = set()  # our lines already logged in this process


class _ReplaceMinPLine(logging.Filter):
    """vLLM's min_p warning becomes our line (an INFO record of vLLM's logger, so it shows where vLLM's would),
    logged once per process; later ones are dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        if VLLM_MIN_P_LINE not in record.getMessage():
            return True
        if OUR_MIN_P_LINE in _said:
            return False
        _said.add(OUR_MIN_P_LINE)
        record.msg, record.args, record.levelno, record.levelname = (
            OUR_MIN_P_LINE,
            (),
            logging.INFO,
            "INFO",
        )
        return True


@contextmanager
def asymspec_log_lines():
    """While inside, vLLM's min_p warning reads as ours (the asymspec runner's __init__ runs inside)."""
    target, rule = logging.getLogger(VLLM_LOGGER), _ReplaceMinPLine()
    target.addFilter(rule)
    try:
        yield
    finally:
        target.removeFilter(rule)
