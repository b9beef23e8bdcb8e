"""evals/benchmarks/bench_image_memory.py at a 1536-pixel side against the server it starts (embedded pair,
transformers backend): each case's statuses (one, two in one request, four at once, the JPEG), the resident memory
figures it reports, the payload's size, the JSON it prints equal to the file it writes; bomb() is the black image
it claims; rss() counts a process's children. Never timed: no memory figure is compared with a limit."""

import base64
import io
import json
import os
import subprocess
import sys
import time

import psutil
import pytest
from asymspec_vl.evals.benchmarks import bench_image_memory as bim
from PIL import Image


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_a_bomb_is_a_black_square_of_the_side(fmt):
    url = bim.bomb(96, fmt)
    head, data = url.split(",", 1)
    assert head == f"data:image/{fmt.lower()};base64"
    image = Image.open(io.BytesIO(base64.b64decode(data)))
    assert image.format == fmt and image.size == (96, 96)
    assert image.convert("L").getextrema()[1] <= 8  # black (JPEG: up to its noise)


def test_rss_counts_the_children():
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "x = bytearray(200_000_000); import time; time.sleep(60)",
        ]
    )
    try:
        kid = psutil.Process(child.pid)
        for _ in range(600):  # the child is still allocating
            if kid.memory_info().rss >= 150_000_000:
                break
            time.sleep(0.05)
        own = psutil.Process(os.getpid()).memory_info().rss
        assert bim.rss(os.getpid()) >= own + 150_000_000
    finally:
        child.kill()
        child.wait()


def test_every_case_is_measured_and_reported(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(bim, "SETTLE_S", 0.2)  # time
    out = tmp_path / "memory.json"
    result = bim.main(["--side", "1536", "--out", str(out)])
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed == result == json.loads(out.read_text())
    png = base64.b64decode(bim.bomb(1536).split(",", 1)[1])  # 6.8 KB
    assert result["side"] == 1536
    assert result["payload_kb"] == pytest.approx(len(png) / 1024, abs=0.5)
    assert [result[k]["status"] for k in ("one", "two", "jpeg")] == [200] * 3
    assert result["four_at_once"]["status"] == [200] * 4
    for case in ("one", "two", "four_at_once", "jpeg"):
        figures = result[case]
        assert figures["error"] is None
        assert 0.05 < figures["baseline_gb"] and 0.05 < figures["peak_gb"]
        assert 0.05 < figures["after_gb"] and figures["seconds"] >= 0
