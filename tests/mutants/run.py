"""Mutation runner: apply each mutant of tests/mutants/*.toml in place, run the tests named to kill it, restore the
file, and print killed / survived per mutant and the kill rate.

    python tests/mutants/run.py                      # every list
    python tests/mutants/run.py --file core.toml     # one list (repeat --file for more)
    python tests/mutants/run.py --timeout 300 -k stats   # mutants whose file or note contains "stats"

A list holds entries
    [[mutant]]
    file = "asymspec_vl/inputs/budget.py"        # relative to the repository root
    old = "exact text (occurs exactly once in the file)"
    new = "the mutated text"
    tests = ["tests/inputs/test_budget.py::test_name"]   # pytest node ids or files
    note = "what bug this is"
A mutant is killed when its tests fail (or time out), survives when they pass. The runner refuses to start while a
target file has uncommitted changes (a restore could not tell them from the mutant), restores every file even on
Ctrl-C or SIGTERM (content and modification time), and runs pytest without writing bytecode, so no mutated .pyc
outlives its mutant. Exit status: 0 when every mutant was killed, 1 otherwise, 2 for a bad list.
Named run.py (not test_*.py): pytest never collects it.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
LISTS = Path(__file__).resolve().parent


class MutantListError(Exception):
    """A list cannot be run as written (a missing field, `old` not found exactly once, a dirty target file)."""


@dataclass(frozen=True)
class Mutant:
    list_name: str
    index: int
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    note: str

    @property
    def label(self) -> str:
        return f"{self.list_name}#{self.index} {self.file}: {self.note}"


def load(paths: list[Path]) -> list[Mutant]:
    """Every mutant of the lists, each checked against the file it mutates."""
    mutants = []
    for path in paths:
        try:
            entries = tomllib.loads(path.read_text(encoding="utf-8")).get("mutant", [])
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise MutantListError(f"{path}: {e}") from e
        for i, entry in enumerate(entries, 1):
            missing = [
                k for k in ("file", "old", "new", "tests", "note") if k not in entry
            ]
            if missing:
                raise MutantListError(
                    f"{path.name} mutant {i}: missing {', '.join(missing)}"
                )
            m = Mutant(
                path.name,
                i,
                entry["file"],
                entry["old"],
                entry["new"],
                tuple(entry["tests"]),
                entry["note"],
            )
            target = ROOT / m.file
            if not target.is_file():
                raise MutantListError(f"{m.label}: no file {m.file}")
            count = target.read_text(encoding="utf-8").count(m.old)
            if count != 1 or m.old == m.new or not m.tests:
                raise MutantListError(
                    f"{m.label}: `old` occurs {count} times in {m.file} (must be once), or "
                    "`new` equals it, or no tests are named"
                )
            mutants.append(m)
    return mutants


def refuse_dirty(files: set[str]) -> None:
    """Uncommitted changes in a target file: refuse (git status lists it)."""
    out = subprocess.run(
        ["git", "status", "--porcelain", "--", *sorted(files)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    if out.strip():
        raise MutantListError(
            "uncommitted changes in files the mutants target; commit or stash them first:\n"
            + out
        )


def run_tests(tests: tuple[str, ...], timeout: float) -> tuple[str, float]:
    """("killed" | "survived" | "timeout" | "no tests", seconds) of one pytest run, in its own process group."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests]
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - start
    finally:
        if (
            proc.poll() is None
        ):  # a timeout or Ctrl-C: end pytest and whatever it started
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    outcome = {0: "survived", 5: "no tests"}.get(
        code, "killed"
    )  # 5: pytest collected nothing
    return outcome, time.monotonic() - start


def run_mutant(m: Mutant, timeout: float) -> tuple[str, float]:
    target = ROOT / m.file
    original, stat = target.read_bytes(), target.stat()
    try:
        target.write_bytes(original.replace(m.old.encode(), m.new.encode(), 1))
        return run_tests(m.tests, timeout)
    finally:
        target.write_bytes(original)
        os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def _interrupted(signum, frame):
    raise KeyboardInterrupt  # SIGTERM restores the file as Ctrl-C does


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--file",
        action="append",
        help="a list in tests/mutants (e.g. core.toml); default: all",
    )
    p.add_argument(
        "-k",
        dest="match",
        default="",
        help="only mutants whose file or note contains this text",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=600,
        help="seconds per mutant's test run (default 600)",
    )
    args = p.parse_args(argv)
    paths = (
        [LISTS / f for f in args.file] if args.file else sorted(LISTS.glob("*.toml"))
    )
    try:
        mutants = [
            m for m in load(paths) if args.match in m.file or args.match in m.note
        ]
        refuse_dirty({m.file for m in mutants})
    except MutantListError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    signal.signal(
        signal.SIGINT, signal.default_int_handler
    )  # also where the shell started it ignoring SIGINT
    signal.signal(signal.SIGTERM, _interrupted)
    killed = 0
    for n, m in enumerate(mutants, 1):
        try:
            outcome, seconds = run_mutant(m, args.timeout)
        except KeyboardInterrupt:
            print(f"interrupted at {m.label}: {m.file} restored", file=sys.stderr)
            return 130
        killed += outcome in ("killed", "timeout")
        print(
            f"[{n:>3}/{len(mutants)}] {outcome:<9} {m.label} ({seconds:.0f} s)",
            flush=True,
        )
    rate = 100 * killed / len(mutants) if mutants else 0.0
    print(f"kill rate: {killed}/{len(mutants)} = {rate:.0f} %")
    return 0 if killed == len(mutants) else 1


if __name__ == "__main__":
    sys.exit(main())
