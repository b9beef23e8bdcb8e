"""One stress case: a workload on its vLLM engine, every request compared with the same request decoded alone on the
transformers backend (tokens, sources, finish, step counts) and, at up to `logit_steps` verification steps of each
request, the logits its rule read (LOGITS: the drafter's a, b and a sampling sd / scd row's drafting logits q, the
verifier's t) with the transformers models' on the same tokens. Engines with worker processes run the case in a
fresh interpreter (`python -m asymspec_vl.evals.stress --workload ...`): vLLM reads its multiprocessing switch once
per process.
A cross-family case (engine.pair "cross") runs on the reference's pair: the rows the engine refuses across the map
(workload.unserved_across_map) are skipped (counted in CaseReport.skipped by reason), its sampled rows run and are
compared as one vocabulary's are (seeded: the same draws on both sides), stop tokens outside the verifier's shared,
unbanned ids are moved onto them (the same-family draw names ids of another vocabulary), and a, b, q are compared in
the drafter's ids, t in the verifier's (hf_side.py); CaseReport.vocabulary says which vocabularies ran.
The drafter alone's rows (workload.DRAFTER) run after the speculative engine's on the drafter's plain engine
(drafter_run.py): tokens and finish compared exactly, and each emitted token's logprob and top alternatives (ids
exactly, values within LOGIT_TOLERANCE of the row's largest |logprob|, at least 1 nat: logprob_error; in verifier ids
across a map), one logit
check per token, the largest error under max_error["logprobs"]."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, replace

import torch

from asymspec_vl.core.errors import ConfigError
from asymspec_vl.inputs.prompts import encode_request

from .drafter_run import run_engines
from .hf_side import LOGIT_TOLERANCE, Reference, relative_error, spread, summary
from .workload import DRAFTER, Workload, make_request, unserved_across_map

RESULT_PREFIX = "STRESS-RESULT "
# the logits a step's entry may hold (probe.captured_step_logits), compared by name
LOGITS = ("a", "b", "q", "t")
# Known findings of issue 23, by a piece of the error they end the engine or the request with.
KNOWN = {
    "shm_all_gather_impl": "finding 1: TP int64 all-gather on the AVX-512 shared-memory communicator",
    "KeyError": "finding 3: DraftLogits.keep_only released a skipped request's slot",
}
FIELDS = (
    "tokens",
    "sources",
    "finish_reason",
    "steps",
    "drafted",
    "accepted",
    "emitted",
    "accepted_at",
)


@dataclass
class Mismatch:
    what: str  # "engine" (an engine failed), "tokens" (a summary field), "a" / "b" / "q" / "t" (logits), "error",
    # "logprobs" (the drafter alone's)
    row: int | None
    detail: str
    known: str | None = None  # the issue-23 finding it matches, if any


@dataclass
class CaseReport:
    seed: int
    workload: str  # Workload.to_json()
    requests: int = 0
    compared: int = 0  # requests compared (all, unless the engine failed)
    sampled: int = 0  # of them, the ones that sample (seeded, temperature > 0)
    drafter: int = 0  # of them, the drafter alone's (its plain engine)
    logit_steps: int = 0  # logit comparisons made (a, b, q, t)
    max_error: dict = field(default_factory=lambda: dict.fromkeys(LOGITS, 0.0))
    resumptions: int = 0
    seconds: dict = field(
        default_factory=lambda: {"engine": 0.0, "reference": 0.0}
    )  # vLLM start + run; transformers
    mismatches: list[Mismatch] = field(default_factory=list)
    skipped: dict = field(
        default_factory=dict
    )  # rows not run, by reason (a cross-family case: "plain", "sampled MODE": unserved_across_map)
    vocabulary: dict = field(
        default_factory=dict
    )  # the pair's: drafter, verifier, shared sizes, identity (Reference.vocabulary)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> CaseReport:
        d = json.loads(text)
        return cls(**{**d, "mismatches": [Mismatch(**m) for m in d["mismatches"]]})


def known_finding(text: str) -> str | None:
    return next((name for key, name in KNOWN.items() if key in text), None)


def run_case(
    workload: Workload,
    paths: dict,
    reference: Reference,
    logit_steps: int = 6,
    here: bool = False,
) -> CaseReport:
    """here: run in this process whatever the engine (the fresh interpreter of a worker-process case)."""
    if workload.engine.in_subprocess and not here:
        return _in_subprocess(workload, paths, logit_steps)
    if workload.engine.pair != reference.name:
        raise ConfigError(
            f"the workload's pair {workload.engine.pair!r} is not the reference's {reference.name!r}"
        )
    workload, skipped = served(workload, reference)
    pair = reference.pair
    encs = [
        encode_request(make_request(r), pair.processor, pair.tokenizer, pair.cross_map)
        for r in workload.rows
    ]
    t0 = time.perf_counter()
    # each request's step logits held for logit_steps steps (at real vocabularies every step would be gigabytes)
    run = run_engines(workload, pair, reference.paths, encs, keep=logit_steps)
    t1 = time.perf_counter()
    report = CaseReport(
        workload.seed,
        workload.to_json(),
        requests=len(workload.rows),
        resumptions=run.resumptions,
        skipped=skipped,
        vocabulary=reference.vocabulary(),
    )
    if run.error:
        report.mismatches.append(
            Mismatch("engine", None, run.error[:2000], known_finding(run.error))
        )
    for i, (row, enc, got) in enumerate(zip(workload.rows, encs, run.rows)):
        if got is None:
            continue
        report.compared += 1
        report.sampled += "temperature" in row.config
        report.drafter += row.mode == DRAFTER
        if got.finish_reason == "error":
            report.mismatches.append(
                Mismatch("error", i, got.error[:2000], known_finding(got.error))
            )
            continue
        expected = reference.alone(row, enc)
        # plain rows: the verifier's greedy tokens; the drafter alone: its tokens, their sources and its finish
        fields = {"plain": FIELDS[:1], DRAFTER: FIELDS[:3]}.get(row.mode, FIELDS)
        diff = [
            (name, e, g)
            for name, e, g in zip(fields, summary(expected), summary(got))
            if e != g
        ]
        if diff:
            report.mismatches.append(
                Mismatch(
                    "tokens",
                    i,
                    "; ".join(f"{n}: transformers {e} vllm {g}" for n, e, g in diff),
                )
            )
        _compare_logits(report, reference, i, enc, run.steps[i], logit_steps)
        if row.mode == DRAFTER:
            compare_logprobs(report, i, expected.logprobs, got.logprobs)
    report.seconds = {
        "engine": round(t1 - t0, 1),
        "reference": round(time.perf_counter() - t1, 1),
    }
    return report


def served(workload: Workload, reference: Reference) -> tuple[Workload, dict]:
    """The workload the engine serves on the reference's pair, and the rows skipped by reason: all of it for one
    vocabulary; across a map without the rows the engine refuses, each stop token outside the verifier's shared,
    unbanned ids moved onto the one at its index modulo their count (idempotent: a served workload is its own)."""
    if reference.vmap.identity:
        return workload, {}
    allowed = sorted(
        set(reference.vmap.verifier_ids.tolist()) - set(reference.pair.banned_ids())
    )
    rows, skipped = [], {}
    for r in workload.rows:
        why = unserved_across_map(r)
        if why:
            skipped[why] = skipped.get(why, 0) + 1
            continue
        if r.stop_token_ids is not None:
            stops = {
                i if i in allowed else allowed[i % len(allowed)]
                for i in r.stop_token_ids
            }
            r = replace(r, stop_token_ids=tuple(sorted(stops)))
        rows.append(r)
    return replace(workload, rows=tuple(rows)), skipped


def _compare_logits(
    report: CaseReport, reference: Reference, i: int, enc, steps: list[dict], k: int
) -> None:
    for i_s in spread(len(steps), k):
        entry = steps[i_s]
        # the request's verification step (the engine holds at most k of them: harness.thin_steps)
        s = entry.get("step", i_s)
        for name in LOGITS:
            if name not in entry:
                continue
            got = entry[name]
            try:
                ref = (
                    reference.a(enc, entry["y"], entry["drafts"], got.shape[0])
                    if name == "a"
                    else getattr(reference, name)(enc, entry["y"], entry["drafts"])
                )
            except (
                ConfigError
            ) as err:  # a token the map cannot move to the drafter's ids
                report.mismatches.append(
                    Mismatch(name, i, f"verification step {s}: {err}")
                )
                continue
            err = relative_error(got, ref)
            report.logit_steps += 1
            report.max_error[name] = max(report.max_error.get(name, 0.0), err)
            if err > LOGIT_TOLERANCE:
                report.mismatches.append(
                    Mismatch(
                        name,
                        i,
                        f"verification step {s} (after {len(entry['y'])} tokens, "
                        f"drafts {entry['drafts']}): relative error {err:.2e} > "
                        f"{LOGIT_TOLERANCE:g}",
                    )
                )


def compare_logprobs(report: CaseReport, i: int, expected, got) -> None:
    """Row i's logprobs (core.logprobs.TokenLogprob lists, None when not asked for) against transformers': each
    token's id, distribution and top alternatives' ids exactly, their logprobs within LOGIT_TOLERANCE (logprob_error
    over the row: [n tokens, 1 + k])."""
    if expected is None and got is None:
        return
    if expected is None or got is None or len(expected) != len(got):
        report.mismatches.append(
            Mismatch(
                "logprobs",
                i,
                f"transformers {_count(expected)} entries, vllm {_count(got)}",
            )
        )
        return
    ids = lambda e: (e.token_id, e.distribution, [t for t, _ in e.top])  # noqa: E731
    for n, (e, g) in enumerate(zip(expected, got)):
        if ids(e) != ids(g):
            report.mismatches.append(
                Mismatch(
                    "logprobs",
                    i,
                    f"token {n}: transformers {ids(e)} vllm {ids(g)}",
                )
            )
            return
    if not expected:
        return
    values = lambda entries: torch.tensor(  # noqa: E731
        [[e.logprob, *(lp for _, lp in e.top)] for e in entries], dtype=torch.float64
    )
    err = logprob_error(values(got), values(expected))
    report.logit_steps += len(expected)
    report.max_error["logprobs"] = max(report.max_error.get("logprobs", 0.0), err)
    if err > LOGIT_TOLERANCE:
        report.mismatches.append(
            Mismatch(
                "logprobs",
                i,
                f"relative error {err:.2e} > {LOGIT_TOLERANCE:g} over {len(expected)} tokens",
            )
        )


def logprob_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    """max |got - ref| / max(max |ref|, 1 nat); inf where a value is not finite. A logprob near 0 (a peaked
    distribution's token) is x - logsumexp(x) of logits of a few units: it carries their float32 rounding, about
    1e-6 nats, whatever its own size (relative_error's scale alone, 3.5e-3 nats, put the seed-104 case's equal
    logprobs at 1.02e-4)."""
    if not (got.isfinite().all() and ref.isfinite().all()):
        return float("inf")
    return float((got - ref).abs().max() / ref.abs().max().clamp_min(1.0))


def _count(entries) -> str:
    return "no" if entries is None else str(len(entries))


def _in_subprocess(workload: Workload, paths: dict, logit_steps: int) -> CaseReport:
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "asymspec_vl.evals.stress",
        "--workload",
        workload.to_json(),
        "--models",
        str(paths["root"]),
        "--logit-steps",
        str(logit_steps),
    ]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        out, err = proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as e:
        out, err = "", f"the case timed out after 900 s: {(e.stderr or b'')[-2000:]!r}"
    lines = [ln for ln in out.splitlines() if ln.startswith(RESULT_PREFIX)]
    if lines:
        report = CaseReport.from_json(lines[-1][len(RESULT_PREFIX) :])
        for m in (
            report.mismatches
        ):  # an engine core or worker process logs the root cause on its stderr
            if m.what == "engine" and m.known is None:
                m.known = known_finding(err)
                cause = [
                    ln
                    for ln in err.splitlines()
                    if "Error" in ln and "EngineDeadError" not in ln
                ]
                m.detail += (
                    (" | root cause on stderr: " + cause[-1][-600:]) if cause else ""
                )
        return report
    report = CaseReport(workload.seed, workload.to_json(), requests=len(workload.rows))
    tail = (out[-1500:] + "\n" + err[-3000:]).strip()
    report.mismatches.append(
        Mismatch(
            "engine",
            None,
            f"the case's process gave no result: {tail}",
            known_finding(tail),
        )
    )
    return report
