"""A model name that cannot load is one ModelPairError line naming it, `embedded` and HF_HUB_OFFLINE, raised before
any model loads: a bad path, a folder without config.json or weights, a hub id offline and not cached, a hub that
does not answer. `embedded` on one side means `embedded` on the other unless both are given."""

import shutil
import socket

import pytest

from asymspec_vl import AsymSpecVL, ModelPairError
from asymspec_vl.cli import build_parser, main
from asymspec_vl.pair.defaults import embedded_models
from asymspec_vl.pair.model_source import locate


def one_line_naming(err: ModelPairError, name: str) -> None:
    text = str(err)
    assert (
        "\n" not in text
        and name in text
        and "embedded" in text
        and "HF_HUB_OFFLINE" in text
    ), text


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed once the with ends: connections are refused


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache of its own, so no cached model of the machine answers."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def cache_repo(cache, repo: str) -> str:
    """Write `repo`'s config.json into the cache as huggingface_hub lays it out; return the snapshot folder."""
    root = cache / f"models--{repo.replace('/', '--')}"
    snap = root / "snapshots" / ("0" * 40)
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text("0" * 40)
    return str(snap)


def test_a_missing_path_is_named(tmp_path):
    with pytest.raises(ModelPairError) as e:
        AsymSpecVL.from_pretrained(drafter=str(tmp_path / "nope"), verifier="embedded")
    one_line_naming(e.value, str(tmp_path / "nope"))
    assert "no such folder" in str(e.value)


def test_a_folder_without_config_json_is_named(tmp_path):
    with pytest.raises(ModelPairError) as e:
        AsymSpecVL.from_pretrained(drafter="embedded", verifier=str(tmp_path))
    one_line_naming(e.value, str(tmp_path))
    assert "config.json" in str(e.value) and "verifier" in str(e.value)


def test_a_folder_with_only_config_json_names_the_missing_weights(tmp_path):
    shutil.copy(f"{embedded_models()['verifier']}/config.json", tmp_path)
    with pytest.raises(ModelPairError) as e:
        AsymSpecVL.from_pretrained(drafter=str(tmp_path), verifier="embedded")
    one_line_naming(e.value, str(tmp_path))
    assert "no weights" in str(e.value)


def test_an_uncached_hub_id_offline_is_named(hub_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelPairError) as e:
        AsymSpecVL.from_pretrained(drafter="embedded", verifier="Qwen/Qwen3-32B")
    one_line_naming(e.value, "Qwen/Qwen3-32B")


def test_an_unreachable_hub_is_said_at_once(hub_cache, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    with pytest.raises(ModelPairError) as e:
        locate("verifier", "Qwen/Qwen3-32B")
    one_line_naming(e.value, "Qwen/Qwen3-32B")
    assert "unreachable" in str(e.value)


@pytest.fixture
def silent_hub():
    """A local server that accepts connections and never answers (a hub behind a stalled proxy)."""
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held, done = [], threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not done.is_set():
            try:
                held.append(server.accept()[0])  # kept open, never read or written
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    done.set()
    t.join()
    for conn in held:
        conn.close()
    server.close()


def test_a_hub_that_accepts_but_never_answers_is_unreachable_within_the_promised_seconds(
    hub_cache, monkeypatch, silent_hub
):
    import time

    from huggingface_hub import constants

    from asymspec_vl.pair.model_source import PROBE_TIMEOUT_S

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", silent_hub)
    start = time.monotonic()
    with pytest.raises(ModelPairError) as e:
        locate("verifier", "Qwen/Qwen3-32B")
    assert time.monotonic() - start < PROBE_TIMEOUT_S + 1.0
    one_line_naming(e.value, "Qwen/Qwen3-32B")
    assert "unreachable" in str(e.value)


def test_a_hub_that_answers_any_status_is_reachable():
    """Reachable means an HTTP answer came back, whatever its status (a 404 of a mirror without /api too)."""
    import http.server
    import threading

    from asymspec_vl.pair.model_source import hub_reachable

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert hub_reachable(
            f"http://127.0.0.1:{server.server_address[1]}", timeout_s=3.0
        )
    finally:
        server.shutdown()
        server.server_close()


def test_a_cached_hub_id_loads_from_its_snapshot_when_the_hub_is_unreachable(
    hub_cache, monkeypatch, capsys
):
    from huggingface_hub import constants

    snapshot = cache_repo(hub_cache, "org/model")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    assert locate("drafter", "org/model") == snapshot
    assert "unreachable" in capsys.readouterr().err
    monkeypatch.setenv(
        "HF_HUB_OFFLINE", "1"
    )  # offline: the id is kept, transformers reads the cache itself
    assert locate("drafter", "org/model") == "org/model"


def test_embedded_on_one_side_means_embedded_on_the_other():
    models = embedded_models()
    vl = AsymSpecVL.from_pretrained(drafter="embedded", device="cpu")
    assert (vl.names["drafter"], vl.names["verifier"]) == (
        models["drafter"],
        models["verifier"],
    )
    vl = AsymSpecVL.from_pretrained(verifier="embedded", device="cpu")
    assert vl.names["drafter"] == models["drafter"]


@pytest.mark.parametrize(
    "argv, expected",
    [
        ([], ("Qwen/Qwen3-VL-2B-Instruct", "Qwen/Qwen3-32B")),
        (["--drafter", "embedded"], ("embedded", "embedded")),
        (["--verifier", "embedded"], ("embedded", "embedded")),
        (["--drafter", "org/d", "--verifier", "embedded"], ("org/d", "embedded")),
    ],
)
def test_the_cli_pairs_embedded_the_same_way(argv, expected):
    args = build_parser().parse_args(["eval", "mathvista", *argv])
    assert (args.drafter, args.verifier) == expected


def test_the_cli_prints_one_line_before_any_model_loads(tmp_path, capsys):
    image = tmp_path / "x.png"
    from PIL import Image

    Image.new("RGB", (8, 8)).save(image)
    code = main(
        [
            "generate",
            "--image",
            str(image),
            "--question",
            "q",
            "--drafter",
            str(tmp_path / "missing"),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, (
        err
    )  # the error alone: the no-caption note waits for models that load
    assert (
        err[0].startswith("asymspec-vl: error:") and str(tmp_path / "missing") in err[0]
    )
