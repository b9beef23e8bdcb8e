"""min_tokens, as vLLM's min-tokens logits processor: the stop tokens' logits are -inf at every output position
below min_tokens. Both backends mask every logits a step reads with it (the transformers loop, the vLLM
proposer's drafts and sampler)."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def hold_stops(
    x: torch.Tensor,
    produced: Sequence[int],
    first: int,
    min_tokens: int,
    stop_ids: Sequence[int],
) -> torch.Tensor:
    """x [B, n, V]: the logits of output positions produced[r] + first + j (j < n) of row r. -> x with the stop
    tokens -inf at the positions below min_tokens (x itself when none is held). Which positions are held is known
    on the host (produced, first, min_tokens are ints): nothing waits for the device, and the mask and the stop ids
    reach it by copies that do not block (issue 44 item 3)."""
    n = x.shape[1]
    held = [[p + first + j < min_tokens for j in range(n)] for p in produced]  # [B, n]
    if not stop_ids or not any(any(row) for row in held):
        return x
    x = x.clone()
    mask = torch.tensor(held).to(x.device, non_blocking=True)  # [B, n]
    stop = torch.tensor(sorted(stop_ids)).to(x.device, non_blocking=True)
    x[..., stop] = x[..., stop].masked_fill(mask[..., None], float("-inf"))
    return x


class MinTokens:
    """The transformers loop's hold: rows' outputs y (lists it extends), one min_tokens and stop set."""

    def __init__(self, min_tokens: int, stop_ids: set[int], y: list[list[int]]):
        self.min_tokens, self.stop_ids, self.y = min_tokens, sorted(stop_ids), y

    def mapped(self, vmap) -> MinTokens:
        """The same hold over the drafter's logits of a cross-family pair: its stop tokens in drafter ids (those
        the map pairs; an unpaired one is never drafted, the drafts being restricted to the shared set)."""
        # one gather of the stop ids (a request's few), not a dict of the whole shared set per request
        ids = [i for i in self.stop_ids if 0 <= i < vmap.verifier_size]
        own = vmap.to("cpu").v2d[torch.tensor(ids, dtype=torch.long)].tolist()
        return MinTokens(self.min_tokens, {d for d in own if d >= 0}, self.y)

    def mask(self, x: torch.Tensor, first: int) -> torch.Tensor:
        """x [B, n, V] the logits of output positions len(y[r]) + first + j, j < n."""
        return hold_stops(
            x, [len(r) for r in self.y], first, self.min_tokens, self.stop_ids
        )
