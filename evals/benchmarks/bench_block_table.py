"""Benchmark: the host cost of one x_comp drafting pass's block table, at the table's full width and at the
allocated width (vllm_patches/drafter/comp_view.py `allocated_blocks`; issue 44 item 3).

    python -m evals.benchmarks.bench_block_table [--rows 16] [--tokens 512] [--block-size 16]

For tables of 2,560 and 16,384 columns (a 40k and Qwen3-VL's 262k context in 16-token blocks) whose rows hold
`tokens` tokens each: the columns and bytes a pass's table copies to the device, and the time of the pass's
CommonAttentionMetadata (drafter_pass.common_metadata, on the CPU; the K passes of a step build it K times).
Prints one line per case.
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    # lazy: loads vLLM
    from vllm.v1.worker.block_table import BlockTable

    # lazy: the patches load vLLM
    from vllm_patches.drafter.comp_view import allocated_blocks

    # lazy: the patches load vLLM
    from vllm_patches.drafter.drafter_pass import PassRow, common_metadata

    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=50)
    args = ap.parse_args()
    torch.set_num_threads(1)
    bs, rows, owned = args.block_size, args.rows, -(-args.tokens // args.block_size)
    cpu = torch.device("cpu")
    for width in (2560, 16384):
        table = BlockTable(bs, rows, width, 8192, False, cpu, bs, 1)
        for i in range(rows):
            table.add_row(list(range(1 + owned * i, 1 + owned * (i + 1))), i)
        for label, reach in (("full width", width), ("allocated", 0)):
            blocks = allocated_blocks(table, rows, reach)  # [B, w]
            batch = [
                PassRow(1, args.tokens - 1, torch.tensor([args.tokens - 1]), blocks[i])
                for i in range(rows)
            ]
            common_metadata(batch, bs, cpu)
            start = time.perf_counter()
            for _ in range(args.repeats):
                common_metadata(batch, bs, cpu)
            ms = (time.perf_counter() - start) / args.repeats * 1e3
            print(
                f"table width {width:6d}, {label:10s}: {blocks.shape[1]:6d} columns, "
                f"{blocks.numel() * 4:8d} bytes a pass, common_metadata {ms:.3f} ms a pass"
            )


if __name__ == "__main__":
    main()
