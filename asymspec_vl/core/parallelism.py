"""Which parallel layouts the pair runs on: pipeline parallelism is refused by name (ParallelismError), wherever it
is asked for (the Python API, the command line, `asymspec-vl serve`, vLLM's own server with the plugin)."""

from __future__ import annotations

from .errors import ParallelismError


def refuse_pipeline_parallelism(size, setting: str) -> None:
    """ParallelismError when `size` > 1; `setting` is how the caller spelled it (pipeline_parallel_size,
    --pipeline-parallel-size). vLLM's GPU model runner makes a speculative engine's drafter on the last pipeline
    stage only (gpu_model_runner.py, `get_pp_group().is_last_rank`), and the asymspec hooks run the drafter beside
    the verifier's whole forward pass (its x_comp pass reads the verifier's step: hooks/runner_patch.py)."""
    if size is None or int(size) <= 1:
        return
    raise ParallelismError(
        f"pipeline parallelism ({setting}={size}) is not supported: vLLM makes a speculative engine's "
        "drafter on the last pipeline stage only, and the asymspec drafter runs beside the verifier's "
        "whole forward pass. "
        "For a verifier larger than one GPU use tensor parallelism (tensor_parallel_size); for more "
        "throughput, data parallelism (data_parallel_size) or one server per node behind a router "
        "(docs/serve.md, 'More than one GPU or machine')."
    )
