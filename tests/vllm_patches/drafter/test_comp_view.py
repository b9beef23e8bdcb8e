"""vllm_patches.drafter.comp_view on a real vLLM BlockTable and stand-in requests: where x_comp drafts write their
KV."""

import types

import torch

from vllm_patches.drafter import comp_view
from vllm_patches.requests.rows import RowState

BLOCK = 4
V = 11


def block_table(rows: list[list[int]], width: int = 6):
    """vLLM's own BlockTable (CPU) with these rows, added as the runner adds them; `width` columns
    (max_model_len / block size)."""
    from vllm.v1.worker.block_table import BlockTable

    table = BlockTable(
        BLOCK,
        max_num_reqs=4,
        max_num_blocks_per_req=width,
        max_num_batched_tokens=64,
        pin_memory=False,
        device=torch.device("cpu"),
        kernel_block_size=BLOCK,
        cp_kv_cache_interleave_size=1,
    )
    for i, ids in enumerate(rows):
        table.add_row(ids, i)
    return table


def proposer_on(table, num_tokens: dict[str, int]):
    """A drafter handle stand-in (with the runner the proposer passes on) whose passes record the cache slots each
    row writes; the drafter always drafts 1."""
    written = []  # (req_id, slot block id) per token a pass writes

    def run_pass(proposer, batch, block_size, token_ids=None):
        for row, req_id in zip(batch, proposer.pass_req_ids):
            written.append((req_id, int(row.block_table[row.start // block_size])))
        return torch.zeros(len(batch), 2), torch.arange(len(batch))

    requests = {
        r: types.SimpleNamespace(num_tokens=n, output_token_ids=[3])
        for r, n in num_tokens.items()
    }
    runner = types.SimpleNamespace(
        input_batch=types.SimpleNamespace(block_table=[table], num_reqs=len(requests)),
        requests=requests,
    )
    logits = torch.zeros(1, V)
    logits[0, 1] = 1
    proposer = types.SimpleNamespace(
        runner=runner,
        kv_cache_gid=0,
        device=torch.device("cpu"),
        uses_mrope=False,
        facts=types.SimpleNamespace(vocab_size=V),
        pass_req_ids=[],
        model=types.SimpleNamespace(compute_logits=lambda h: logits.expand(len(h), V)),
    )
    return proposer, run_pass, written


def test_a_reused_rows_stale_block_ids_are_never_written(monkeypatch):
    """Finding 2: row 0 held blocks [5, 6, 7] for an earlier request; the request now in it (3 tokens, one
    block: 9) got no lookahead block. vLLM's add_row resets the count, not the tail, so blocks 6 and 7 (now
    another live request's, row 1) still sit in the row. Its K = 2 drafts at cache slots 2..3 stay in block 9;
    with K = 4 they reach slots 4..5 of its second block, which it does not own: they must go to the null block
    0, never to block 6."""
    table = block_table([[5, 6, 7], [6, 7, 8]])
    table.add_row([9], 0)  # row 0 reused: count 1, tail [6, 7] stale
    assert (
        table.get_cpu_tensor()[0, :3].tolist() == [9, 6, 7]
        and table.num_blocks_per_row[0] == 1
    )
    proposer, run_pass, written = proposer_on(table, {"new": 3, "live": 9})

    rows = [(0, "new", RowState(None, 4)), (1, "live", RowState(None, 2))]
    starts = {
        2: "new",
        3: "new",
        4: "new",
        5: "new",
        8: "live",
        9: "live",
    }  # cache slot -> the row at it

    def by_start(proposer_, batch, block_size, token_ids=None, decode=False):
        proposer_.pass_req_ids = [starts[row.start] for row in batch]
        return run_pass(proposer_, batch, block_size, token_ids)

    monkeypatch.setattr(comp_view, "run_pass", by_start)
    drafts = comp_view.CompView(proposer, None).draft(
        rows, proposer.runner.input_batch, proposer.runner.requests
    )
    assert drafts == {"new": [1] * 4, "live": [1] * 2}
    new_blocks = [b for rid, b in written if rid == "new"]
    assert new_blocks == [9, 9, 0, 0], (
        written
    )  # slots 2, 3 in its own block; 4, 5 through the null block
    assert 6 not in new_blocks and 7 not in new_blocks
    assert [b for rid, b in written if rid == "live"] == [8, 8]


def test_allocated_blocks_zero_what_a_row_does_not_own():
    table = block_table([[5, 6, 7], [1, 2]])
    table.add_row([9], 0)
    assert comp_view.allocated_blocks(table, 2, reach=4).tolist() == [
        [9, 0, 0, 0],
        [1, 2, 0, 0],
    ]
    # the allocated width: the widest row's own blocks (2), at most the table's (6)
    assert comp_view.allocated_blocks(table, 2).tolist() == [[9, 0], [1, 2]]
    assert comp_view.allocated_blocks(table, 2, reach=9).shape == (2, 6)


def test_drafting_passes_read_the_allocated_width_not_the_tables(monkeypatch):
    """A table 4,096 columns wide (a 16k context in 4-token blocks) whose rows own 2 and 1 blocks: every drafting
    pass gets 2 columns (the widest row's), or 3 where a row's last draft slot lies past every row's blocks
    (it writes through the null block there), never 4,096 (copied to the device K times a step)."""
    widths = []

    def record(proposer_, batch, block_size, token_ids=None, decode=False):
        widths.append({len(row.block_table) for row in batch})
        proposer_.pass_req_ids = [
            "a" if row.block_table[0] == 5 else "b" for row in batch
        ]
        return run_pass(proposer_, batch, block_size, token_ids)

    monkeypatch.setattr(comp_view, "run_pass", record)
    table = block_table([[5, 6], [7]], width=4096)
    for num_tokens, K, width in (({"a": 6, "b": 2}, 2, 2), ({"a": 8, "b": 2}, 2, 3)):
        widths.clear()
        proposer, run_pass, written = proposer_on(table, num_tokens)
        rows = [(0, "a", RowState(None, K)), (1, "b", RowState(None, K))]
        comp_view.CompView(proposer, None).draft(
            rows, proposer.runner.input_batch, proposer.runner.requests
        )
        assert widths and all(w == {width} for w in widths), (num_tokens, widths)
    # a's drafts at slots 7, 8: slot 8 past its blocks, through the null block
    assert [b for rid, b in written if rid == "a"] == [6, 0]


def test_rows_whose_last_draft_slot_is_unallocated_draft_alone(monkeypatch):
    """Two rows at cache slot 3 of a one-block row (block size 4), K = 2: their drafts take slots 3 and 4, and
    slot 4 lies in a block neither owns. Each writes it through the null block, so they must not share a pass
    (two rows writing the same null-block slot in one pass); a row whose K slots fit its blocks batches."""
    table = block_table([[7], [8], [9, 10]])
    proposer, run_pass, written = proposer_on(table, {"p": 4, "q": 4, "fit": 6})
    starts = {}
    passes = []

    def record(proposer_, batch, block_size, token_ids=None, decode=False):
        proposer_.pass_req_ids = [
            starts[(row.start, int(row.block_table[0]))] for row in batch
        ]
        passes.append(sorted(proposer_.pass_req_ids))
        return run_pass(proposer_, batch, block_size, token_ids)

    starts.update(
        {
            (3, 7): "p",
            (4, 7): "p",
            (3, 8): "q",
            (4, 8): "q",
            (5, 9): "fit",
            (6, 9): "fit",
        }
    )
    monkeypatch.setattr(comp_view, "run_pass", record)
    rows = [
        (0, "p", RowState(None, 2)),
        (1, "q", RowState(None, 2)),
        (2, "fit", RowState(None, 2)),
    ]
    comp_view.CompView(proposer, None).draft(
        rows, proposer.runner.input_batch, proposer.runner.requests
    )
    assert passes == [["fit"], ["fit"], ["p"], ["p"], ["q"], ["q"]]
    assert [b for rid, b in written if rid == "p"] == [7, 0]
