"""asymspec_vl/serve/vllm_latency.py: vLLM's token counters and latency histograms, their buckets read from vLLM's own
loggers.py, their values from a request's steps on a stand-in clock (no server)."""

import ast
import importlib.util
from pathlib import Path

import pytest
from serve_support import metric

LABELS = {"model_name": "served", "engine": "0"}


def vllm_buckets() -> dict[str, list[float]]:
    """Each histogram's buckets as vLLM 0.19's PrometheusStatLogger declares them (its source, read with ast: not
    imported, which would load torch)."""
    root = Path(importlib.util.find_spec("vllm").origin).parent
    tree = ast.parse((root / "v1" / "metrics" / "loggers.py").read_text())
    named = {}  # variable -> list literal (request_latency_buckets = [...])
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.List):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    named[target.id] = node.value
    out = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        kw = {k.arg: k.value for k in node.keywords}
        if "name" in kw and "buckets" in kw and isinstance(kw["name"], ast.Constant):
            value = kw["buckets"]
            value = named.get(value.id, value) if isinstance(value, ast.Name) else value
            if isinstance(value, ast.List):
                out[kw["name"].value] = [float(ast.literal_eval(e)) for e in value.elts]
    return out


def test_the_histograms_have_vllms_names_and_buckets():
    from asymspec_vl.serve.metrics import ServeMetrics

    text = ServeMetrics("served").render().decode()
    want = vllm_buckets()
    for name in (
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:request_time_per_output_token_seconds",
        "vllm:e2e_request_latency_seconds",
    ):
        got = [
            float(line.split('le="')[1].split('"')[0])
            for line in text.splitlines()
            if line.startswith(name + "_bucket{") and 'le="+Inf"' not in line
        ]
        assert got == want[name] and got, name
        assert 'model_name="served"' in text and 'engine="0"' in text


def test_a_requests_steps_feed_vllms_counters_and_histograms():
    """Arrival at 0; steps at 0.5 s (2 tokens), 0.5 s again (no new token), 0.75 s (5), 1 s (6); done at 1.25 s."""
    from asymspec_vl.serve.metrics import ServeMetrics

    m = ServeMetrics("served")
    times = iter([0.5, 0.75, 1.0, 1.25])
    clock = m.vllm_latency.clock(0.0, 12, now=lambda: next(times))
    for tokens in (2, 2, 5, 6):
        clock.step(tokens)
    clock.finished()
    text = m.render().decode()

    def value(name, **labels):
        return metric(text, name, **LABELS, **labels)

    assert value("vllm:prompt_tokens_total") == 12
    assert value("vllm:generation_tokens_total") == 6
    for name, count, seconds, le in (
        ("vllm:time_to_first_token_seconds", 1, 0.5, "0.5"),
        ("vllm:inter_token_latency_seconds", 2, 0.25 + 0.25, "0.3"),
        ("vllm:request_time_per_output_token_seconds", 1, 0.5 / 5, "0.1"),
        ("vllm:e2e_request_latency_seconds", 1, 1.25, "1.5"),
    ):
        assert value(name + "_count") == count, name
        assert value(name + "_sum") == pytest.approx(seconds), name
        assert value(name + "_bucket", le=le) == count, (
            name
        )  # in the bucket vLLM puts it


def test_one_token_is_no_gap_and_zero_per_token_time():
    """vLLM: mean_time_per_output_token is 0 for a one-token answer; no inter-token latency is observed."""
    from asymspec_vl.serve.metrics import ServeMetrics

    m = ServeMetrics("served")
    times = iter([0.3, 0.4])
    clock = m.vllm_latency.clock(0.0, 3, now=lambda: next(times))
    clock.step(1)
    clock.finished()
    text = m.render().decode()
    assert metric(text, "vllm:inter_token_latency_seconds_count", **LABELS) == 0
    assert metric(text, "vllm:request_time_per_output_token_seconds_sum", **LABELS) == 0
    assert metric(text, "vllm:generation_tokens_total", **LABELS) == 1
