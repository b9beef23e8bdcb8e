"""The built wheel is the whole product: every module of the tree, and the command line working from a fresh venv.

The wheel is built from a copy of the working tree (`pip wheel --no-deps --no-build-isolation`) and installed
non-editable into a fresh venv whose only link to this machine's packages is a .pth naming the site-packages the
dependencies already live in (a .pth inside a .pth-added folder is never run, so the editable install's finder
stays out); nothing is fetched. The commands then run from that venv, outside the repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tests.test_import_direction import modules

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory):
    """(wheel path, the fresh venv's bin folder) with the wheel installed in it."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "-co", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(tmp / "dist"),
            str(source),
        ],
        check=True,
        timeout=600,
    )
    (wheel,) = (tmp / "dist").glob("asymspec_vl-*.whl")
    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [
            str(python),
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    deps = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    assert deps, sys.path
    (Path(purelib) / "zz-dependencies.pth").write_text("\n".join(deps) + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            "--ignore-installed",
            "-q",
            str(wheel),
        ],
        check=True,
        timeout=600,
    )
    return wheel, env_dir / "bin"


def run(bin_dir: Path, *argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return subprocess.run(
        [str(bin_dir / argv[0]), *argv[1:]],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=900,
    )


def test_the_wheel_holds_every_module_of_the_tree(wheel_venv):
    wheel, _ = wheel_venv
    held = {n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".py")}
    tree = {
        name.replace(".", "/")
        + ("/__init__.py" if path.name == "__init__.py" else ".py")
        for name, path in modules()
    }
    assert sorted(tree - held) == [] and sorted(held - tree) == []


def test_the_installed_wheel_is_what_runs(wheel_venv, tmp_path):
    _, bin_dir = wheel_venv
    out = run(
        bin_dir,
        "python",
        "-c",
        "import asymspec_vl, vllm_patches, asymspec_vl.serve, asymspec_vl.demo; "
        "print(asymspec_vl.__file__); print(vllm_patches.__file__); print(asymspec_vl.demo.__file__)",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    venv_dir = bin_dir.parent.resolve()
    assert all(
        Path(line).resolve().is_relative_to(venv_dir) for line in out.stdout.split()
    ), out.stdout


def test_the_command_line_runs_from_the_wheel(wheel_venv, tmp_path):
    _, bin_dir = wheel_venv
    for argv in (("asymspec-vl", "--help"), ("asymspec-vl", "serve", "--help")):
        out = run(bin_dir, *argv, cwd=tmp_path)
        assert out.returncode == 0 and "usage: asymspec-vl" in out.stdout, (
            argv,
            out.stderr[-2000:],
        )
    out = run(bin_dir, "asymspec-vl", "eval", "toy", "--n", "5", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "asymspec" in out.stdout.lower(), out.stdout
