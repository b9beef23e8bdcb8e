"""Both protocols' verdicts on every response: the official rules (rule or LLM extraction, MathVista's official
normalisation) and the release's rules; a record's headline fields (those the tables count) follow one of them.

A result record carries
  "protocol": the prompt protocol its run used;
  "verdicts": {"official": V, "release": V}, V = {"extraction", "extractor", "prediction", "correct"};
  "scored_by" plus V's four fields at the top level: the verdict of the protocol the table reports.
"""

from __future__ import annotations

from . import release
from .scoring import score

DEFAULT = "official"  # records written before protocols existed were made and scored the official way


def verdict(extraction: str, extractor: str, prediction, correct: bool) -> dict:
    return {
        "extraction": extraction,
        "extractor": extractor,
        "prediction": prediction,
        "correct": correct,
    }


def verdicts(response: str, facts: dict, query: str, extractor) -> dict[str, dict]:
    """Both verdicts on one response; `extractor` (rule or LLM) makes the official extraction."""
    official = extractor.extract(response, facts, query)
    released = release.extract(response, facts)
    return {
        "official": verdict(official, extractor.name, *score(official, facts)),
        "release": verdict(
            released, release.EXTRACTOR, *release.score(released, facts)
        ),
    }


def headline(both: dict[str, dict], protocol: str) -> dict:
    """The top-level fields of a record scored by `protocol`."""
    return {"scored_by": protocol, **both[protocol], "verdicts": both}


def kept(rec: dict) -> dict[str, dict]:
    """Both verdicts re-normalised from a record's stored extractions (no new extraction, except the release's
    rules where a record from before protocols existed has none stored)."""
    stored = dict(rec.get("verdicts") or {})
    if (
        "official" not in stored
    ):  # an older record: its top-level extraction is the official one
        stored["official"] = {
            "extraction": rec.get("extraction", ""),
            "extractor": rec.get("extractor", "rule"),
        }
    official = stored["official"]["extraction"]
    released = (
        stored["release"]["extraction"]
        if "release" in stored
        else release.extract(rec["response"], rec)
    )
    return {
        "official": verdict(
            official, stored["official"].get("extractor", "rule"), *score(official, rec)
        ),
        "release": verdict(released, release.EXTRACTOR, *release.score(released, rec)),
    }


def label(records: list[dict]) -> str:
    """Which protocols made a table: "prompts: official, scoring: release"."""

    def joined(key: str) -> str:
        return " + ".join(sorted({r.get(key) or DEFAULT for r in records})) or DEFAULT

    return f"prompts: {joined('protocol')}, scoring: {joined('scored_by')}"
