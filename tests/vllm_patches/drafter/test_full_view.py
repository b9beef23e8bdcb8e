"""vllm_patches.drafter.full_view on a stand-in drafter handle: the x_full prefill in chunks and the image embeddings
it reads."""

import types

import torch

from asymspec_vl.core.sources import RowLedger
from vllm_patches.drafter import full_view
from vllm_patches.drafter.full_view_images import FullViewImages
from vllm_patches.requests.rows import RowState

IMAGE = 7  # image_pad token id
H, V = 3, 11


def test_each_chunk_of_a_chunked_prefill_reads_its_own_image_embeddings(monkeypatch):
    """A row of 2 text + 6 image tokens prefilled in chunks of 4 tokens: the first chunk's 2 image tokens read
    embeddings 0..1, the second chunk's 4 read embeddings 2..5, never 0..3 again."""
    feed = [1, 2] + [IMAGE] * 6
    state = RowState(None, 2)
    embeddings = (
        torch.arange(6.0).repeat_interleave(H).view(6, H)
    )  # embedding j is all j
    images = FullViewImages(
        [("r", state, feed)],
        [torch.tensor(feed) == IMAGE],
        lambda req_id: (embeddings,),
        None,
        (),
    )
    read = []

    def embed_input_ids(ids, multimodal_embeddings, is_multimodal):
        read.append(multimodal_embeddings[0][:, 0].tolist())
        return torch.zeros(len(ids), H)

    def run_pass(drafter, batch, block_size, kv, token_ids=None, inputs_embeds=None):
        n = sum(row.length for row in batch)
        return torch.zeros(n, H), torch.tensor([n - 1])

    drafter = types.SimpleNamespace(
        max_batched_tokens=4,
        device=torch.device("cpu"),
        uses_mrope=False,
        model=types.SimpleNamespace(
            embed_input_ids=embed_input_ids,
            compute_logits=lambda h: torch.zeros(len(h), V),
        ),
    )
    view = full_view.FullView(None, None)
    view.drafter = drafter
    view.pool = types.SimpleNamespace(block_size=4, tensors={}, blocks={"r": [3, 4, 5]})
    view.rows["r"] = full_view.FullRow(
        RowLedger(prompt=list(feed)), torch.arange(len(feed)), 0, True
    )
    monkeypatch.setattr(full_view, "run_pass", run_pass)
    last = view.first_pass([("r", state, feed)], images)
    assert read == [[0.0, 1.0], [2.0, 3.0, 4.0, 5.0]]
    assert last[0].shape == (V,)


def test_a_steps_images_are_embedded_as_the_prefill_reaches_each_row(monkeypatch):
    """Three image rows (1 text + 4 image tokens each) prefilled in chunks of 5 tokens: each row's vision tower
    runs when its chunk comes and its embeddings are gone once read (one row's held at a time), not all three
    up front; every chunk reads the same embeddings as before (row j's token i reads 10 * j + i). A row whose
    vision tower fails is failed alone before any of its tokens is fed, and the others' chunks are unchanged."""
    events = []

    class Images:
        def embeddings(self, req_id):
            events.append(("tower", req_id))
            if req_id == "bad":
                raise RuntimeError("vision tower out of memory (simulated)")
            j = float("abc".index(req_id))
            return (
                (10 * j + torch.arange(2.0)).repeat_interleave(H).view(2, H),
                (10 * j + torch.arange(2.0, 4.0)).repeat_interleave(H).view(2, H),
            )

    def embed_input_ids(ids, multimodal_embeddings, is_multimodal):
        events.append(("read", torch.cat(multimodal_embeddings)[:, 0].tolist()))
        return torch.zeros(len(ids), H)

    fed = []

    def run_pass(drafter, batch, block_size, kv, token_ids=None, inputs_embeds=None):
        fed.append([row.block_table[0].item() for row in batch])
        n = sum(row.length for row in batch)
        return torch.zeros(n, H), torch.tensor([n - 1])

    failed = []
    view = full_view.FullView(Images(), None)
    view.drafter = types.SimpleNamespace(
        max_batched_tokens=5,
        device=torch.device("cpu"),
        uses_mrope=False,
        facts=types.SimpleNamespace(image_token_id=IMAGE),
        request_errors=(RuntimeError,),
        model=types.SimpleNamespace(
            embed_input_ids=embed_input_ids,
            compute_logits=lambda h: torch.zeros(len(h), V),
        ),
    )
    monkeypatch.setattr(full_view, "run_pass", run_pass)
    feed = [1] + [IMAGE] * 4
    for names in (["a", "b", "c"], ["a", "bad", "c"]):
        events.clear(), fed.clear()
        view.pool = types.SimpleNamespace(
            block_size=8, tensors={}, blocks={r: [i] for i, r in enumerate(names)}
        )
        rows = [(r, RowState(None, 2), list(feed)) for r in names]
        for r in names:
            view.rows[r] = full_view.FullRow(
                RowLedger(prompt=list(feed)), torch.arange(5), 0, True
            )
        plan = types.SimpleNamespace(full_rows=list(rows))
        images = view.images_for(plan, lambda req_id, state, err: failed.append(req_id))
        last = view.first_pass(plan.full_rows, images)
        reads = {
            r: ("read", [10.0 * "abc".index(r) + i for i in range(4)]) for r in "ac"
        }
        if names[1] == "b":
            reads["b"] = ("read", [10.0, 11.0, 12.0, 13.0])
            assert events == [e for r in names for e in (("tower", r), reads[r])]
            assert fed == [[0], [1], [2]] and all(a.shape == (V,) for a in last)
            assert images.peak == 4 and images.held == {}
        else:
            assert events == [
                ("tower", "a"),
                reads["a"],
                ("tower", "bad"),
                ("tower", "c"),
                reads["c"],
            ]
            assert fed == [[0], [2]] and failed == ["bad"] and last[1] is None


def test_score_never_computes_logits_of_a_chunk_that_reads_none(monkeypatch):
    """b of a 10-token feed (a cross-family row's first x_comp feed) read after its last 3 tokens, in chunks of 4:
    the chunk 0..3 reads no logits and must not reach compute_logits (at TP=2 its all-gather of 0 rows killed the
    CPU build's workers: shm_all_gather's divide trap); the logits are those of cache slots 7, 8, 9."""
    feed = list(range(20, 30))
    rows_seen = []

    def run_pass(drafter, batch, block_size, kv, token_ids=None, inputs_embeds=None):
        slots = [row.start + j for row in batch for j in range(row.length)]
        return torch.tensor(slots, dtype=torch.float).unsqueeze(1).expand(-1, H), None

    def compute_logits(hidden):
        rows_seen.append(len(hidden))
        return hidden[:, :1].expand(-1, V)

    view = full_view.FullView(None, None)
    view.drafter = types.SimpleNamespace(
        max_batched_tokens=4,
        device=torch.device("cpu"),
        uses_mrope=False,
        model=types.SimpleNamespace(compute_logits=compute_logits),
    )
    view.pool = types.SimpleNamespace(block_size=4, tensors={}, blocks={"r": [3, 4, 5]})
    view.rows["r"] = full_view.FullRow(
        RowLedger(prompt=list(feed)), torch.arange(len(feed)), 0, False
    )
    monkeypatch.setattr(full_view, "run_pass", run_pass)
    b = view.score([("r", feed)], 3)
    assert 0 not in rows_seen and sum(rows_seen) == 3
    assert b[:, 0].tolist() == [7.0, 8.0, 9.0] and b.shape == (3, V)
