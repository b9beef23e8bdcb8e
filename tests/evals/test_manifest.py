"""evals/manifest.py: a run's manifest tells two runs apart: installed package versions (those missing left out),
the git commit and whether the checkout is dirty (None outside git), the command, and it is written as JSON with
its folder made."""

import json
import subprocess

import torch
from asymspec_vl.evals import manifest


def test_package_versions_list_the_installed_ones_only():
    versions = manifest.package_versions(("torch", "no-such-package-asymspec"))
    assert (
        set(versions) == {"torch"}
        and versions["torch"].split("+")[0] == torch.__version__.split("+")[0]
    )


def test_git_state_reads_the_commit_and_dirtiness(tmp_path):
    def git(*args):
        return subprocess.run(
            ["git", "-C", str(tmp_path), *args],
            check=True,
            capture_output=True,
            text=True,
        )

    assert manifest.git_state(tmp_path) is None  # not a checkout
    git("init", "-q")
    git(
        "-c",
        "user.email=t@t",
        "-c",
        "user.name=t",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "first",
    )
    (tmp_path / "f.txt").write_text("a")
    git("add", "f.txt")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "second")
    head = git("rev-parse", "HEAD").stdout.strip()
    assert manifest.git_state(tmp_path) == {"commit": head, "dirty": False}
    (tmp_path / "f.txt").write_text("b")
    assert manifest.git_state(tmp_path) == {"commit": head, "dirty": True}


def test_a_manifest_is_written_as_json_with_its_folder(tmp_path):
    m = manifest.build_manifest(
        "toy", {"drafter": "d"}, {"K": 2}, {"sha256": "x"}, extra={"note": "n"}
    )
    assert {
        "benchmark",
        "created",
        "command",
        "models",
        "config",
        "data",
        "versions",
        "python",
        "platform",
        "git",
        "note",
    } <= set(m)
    path = manifest.write_manifest(tmp_path / "deep" / "run.json", m)
    assert json.loads(path.read_text()) == json.loads(json.dumps(m, default=str))
