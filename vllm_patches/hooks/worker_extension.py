"""Worker methods the client calls by name (LLM.collective_rpc("asymspec_..."), never a pickled function.

With multiprocessing (vLLM's default on GPUs) a function sent to the workers goes through msgpack, which
refuses functions unless VLLM_ALLOW_INSECURE_SERIALIZATION=1. Named methods travel as strings, and their
arguments and results (tensors, dicts, lists) through msgpack as data. vLLM mixes this class into its worker
class when `worker_extension_cls` names it: the backend sets it on every engine it builds, and the config
patch sets it on every asymspec engine that does not name another (so `vllm serve` and direct `LLM(...)` users
get it too).
"""

from __future__ import annotations

import torch

from ..probes.phase_timing import PhaseTimer
from ..requests.request_args import pack_tensor
from . import harness
from .graph_switch import switch
from .runner_state import runner_state

WORKER_EXTENSION = "vllm_patches.hooks.worker_extension.AsymSpecWorkerExtension"


class AsymSpecWorkerExtension:
    """Mixed into vLLM's Worker (self.model_runner is the worker's runner)."""

    def _asymspec_proposer(self):
        proposer = getattr(
            self.model_runner, "drafter", None
        )  # vLLM names the proposer `drafter`
        if proposer is None or not hasattr(proposer, "registry"):
            raise RuntimeError(
                "this engine runs no asymspec drafter (speculative method 'asymspec')"
            )
        return proposer

    # -- an asymspec engine: counters, captured logits, phase timing --------------------------------
    def asymspec_counters(self) -> dict:
        proposer = self._asymspec_proposer()
        pool, images = proposer.full.pool, proposer.full.images
        return {
            "vision_tower_calls": images.vision_tower_calls
            if images is not None
            else 0,
            "live_requests": len(proposer.registry.rows),
            "free_full_view_blocks": len(pool.free),
            "full_view_blocks": pool.num_blocks - 1,
            "full_view_block_size": pool.block_size,
            "resumptions": proposer.registry.resumptions,
            "engine_K": proposer.K,
            "attention_backends": sorted(
                {g.backend.get_name() for g in proposer.attention.groups}
            ),
            "drafter_builders": [
                type(g.get_metadata_builder()).__name__
                for g in proposer.attention.groups
            ],
        }

    def asymspec_set_capture(self, on: bool) -> None:

        harness.record(self._asymspec_proposer(), "proposals", on)

    def asymspec_captured(self) -> dict:

        proposals = harness.recording(self._asymspec_proposer()).proposals or {}
        return {
            req_id: {
                **row,
                "a": [{**p, "a": pack_tensor(p["a"])} for p in row["a"]],
                "b": [{**p, "b": pack_tensor(p["b"])} for p in row["b"]],
            }
            for req_id, row in proposals.items()
        }  # msgpack carries no tensors: packed

    def asymspec_set_step_capture(self, on: bool, keep: int | None = None) -> None:

        harness.record(self._asymspec_proposer(), "steps", on, keep)

    def asymspec_step_captured(self) -> dict:

        steps = harness.recording(self._asymspec_proposer()).steps or {}
        return {
            req_id: [
                {
                    k: pack_tensor(v) if isinstance(v, torch.Tensor) else v
                    for k, v in entry.items()
                }
                for entry in entries
            ]
            for req_id, entries in steps.items()
        }

    def asymspec_drafter_graphs(self, on: bool | None = None) -> dict:
        """Switch the drafter's compiled passes (and CUDA graphs) on or off, counting them (graph_switch.py)."""

        return switch(self._asymspec_proposer(), on)

    def _asymspec_runner(self):

        state = runner_state(self.model_runner)
        if state is None:
            raise RuntimeError(
                "this engine runs no asymspec drafter (speculative method 'asymspec')"
            )
        return state

    def asymspec_set_timing(self, on: bool) -> None:

        self._asymspec_runner().timer = PhaseTimer() if on else None

    def asymspec_timing(self) -> dict | None:
        timer = self._asymspec_runner().timer
        return timer.report() if timer is not None else None

    def asymspec_profile_vision_tower(self) -> list[int] | None:
        """Run the drafter's vision tower on the largest image its processor makes (what the runner's profile
        run does before vLLM sizes the KV cache); the image grid it used."""
        return self._asymspec_proposer().profile_vision_tower()
