"""vllm_patches.drafter.drafter_pass.common_metadata: a pass's queries, sequence lengths, block table and slot mapping
for rows of mixed lengths and block counts (the prefill and decode forms), and a decode pass's."""

import torch

from vllm_patches.drafter.drafter_pass import PassRow, common_metadata

CPU = torch.device("cpu")


def row(length, start, blocks):
    return PassRow(
        length,
        start,
        torch.arange(start, start + length),
        torch.tensor(blocks, dtype=torch.int32),
    )


def test_mixed_rows_get_their_own_slots_and_a_zero_padded_table():
    # block size 4: row 0 appends 3 tokens at cache indices 2..4 (blocks 9, 5), row 1 one token at 0 (block 7),
    # row 2 two tokens at 7..8 (blocks 1, 2, 3)
    common = common_metadata(
        [row(3, 2, [9, 5]), row(1, 0, [7]), row(2, 7, [1, 2, 3])], 4, CPU
    )
    assert common.query_start_loc_cpu.tolist() == [0, 3, 4, 6]
    assert common.seq_lens.tolist() == [5, 1, 9]
    assert common.block_table_tensor.tolist() == [[9, 5, 0], [7, 0, 0], [1, 2, 3]]
    assert common.block_table_tensor.dtype == torch.int32
    assert common.slot_mapping.tolist() == [
        9 * 4 + 2,
        9 * 4 + 3,
        5 * 4 + 0,
        7 * 4 + 0,
        2 * 4 + 3,
        3 * 4 + 0,
    ]
    assert (
        common.num_reqs,
        common.num_actual_tokens,
        common.max_query_len,
        common.max_seq_len,
    ) == (3, 6, 3, 9)


def test_a_decode_pass_writes_each_rows_next_slot():
    common = common_metadata([row(1, 5, [4, 6]), row(1, 3, [8])], 4, CPU)
    assert common.query_start_loc_cpu.tolist() == [0, 1, 2]
    assert common.slot_mapping.tolist() == [6 * 4 + 1, 8 * 4 + 3]
    assert common.seq_lens.tolist() == [
        6,
        4,
    ] and common._num_computed_tokens_cpu.tolist() == [5, 3]
    assert (common.num_actual_tokens, common.max_query_len, common.max_seq_len) == (
        2,
        1,
        6,
    )
