"""serve/vllm_gauges.py: vLLM's request counter and scheduler gauges with vLLM's names and labels (model_name,
engine "0"), every finished reason present from the start, any other ending counted as an abort, and only the
gauges the runner read exported."""

from prometheus_client import CollectorRegistry, generate_latest

from asymspec_vl.serve.vllm_gauges import VLLMRequestCounter, gauge_families


def test_the_request_counter_has_vllms_reasons_from_the_start_and_counts_others_as_abort():
    registry = CollectorRegistry()
    counter = VLLMRequestCounter(registry, "asymspec-vl")
    for reason in ("stop", "stop", "length", "timeout"):
        counter.count(reason)
    text = generate_latest(registry).decode()
    for reason, n in (("stop", 2), ("length", 1), ("error", 0), ("abort", 1)):
        assert (
            f'vllm:request_success_total{{engine="0",finished_reason="{reason}",model_name="asymspec-vl"}} '
            f"{float(n)}"
        ) in text


def test_only_the_gauges_the_runner_read_are_exported_with_vllms_names():
    families = {f.name: f for f in gauge_families("m", {"running": 3, "waiting": 0})}
    assert set(families) == {
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
    }  # no paged cache: no usage
    sample = families["vllm:num_requests_running"].samples[0]
    assert sample.labels == {"model_name": "m", "engine": "0"} and sample.value == 3.0
    assert [f.name for f in gauge_families("m", {"kv_cache_usage": 0.25})] == [
        "vllm:kv_cache_usage_perc"
    ]
