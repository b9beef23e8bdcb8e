"""The server-wide pixel budget (asymspec_vl/serve/media.py ServerPixels, --max-server-pixels): requests whose images
do not fit beside those being decoded and encoded wait their turn in arrival order, a request that leaves while it
waits gives its place back, and the chat service holds a request's pixels from before its first decode until its
conversation is encoded, with the decode told the drafter processor's size rule."""

import asyncio
from types import SimpleNamespace

import pytest
from test_bad_input import bomb_png  # a PNG header declaring a huge image

from asymspec_vl.cli import build_parser
from asymspec_vl.core.errors import ConfigError, ImageTooLargeError
from asymspec_vl.serve import chat
from asymspec_vl.serve.cli import settings_from_args
from asymspec_vl.serve.media import ServerPixels
from asymspec_vl.serve.settings import ServeSettings


def settings(**kw) -> ServeSettings:
    return ServeSettings("embedded", "embedded", backend="hf", **kw)


async def holder(
    pixels: ServerPixels, n: int, log: list, name: str, release: asyncio.Event
):
    async with pixels.hold(n):
        log.append(f"{name} in")
        await release.wait()
    log.append(f"{name} out")


def test_requests_beyond_the_budget_wait_in_arrival_order():
    async def run():
        pixels, log = ServerPixels(100), []
        gates = {k: asyncio.Event() for k in "abc"}
        tasks = [
            asyncio.create_task(holder(pixels, n, log, k, gates[k]))
            for k, n in (("a", 60), ("b", 60), ("c", 30))
        ]
        await asyncio.sleep(0.01)
        assert (
            log == ["a in"] and pixels.held == 60
        )  # c would fit (90) but waits behind b: first come first served
        gates["a"].set()
        await asyncio.sleep(0.01)
        assert log == ["a in", "a out", "b in", "c in"] and pixels.held == 90
        gates["b"].set(), gates["c"].set()
        await asyncio.gather(*tasks)
        assert pixels.held == 0

    asyncio.run(run())


def test_a_request_without_images_never_waits_behind_image_requests():
    async def run():
        pixels, log, gate = ServerPixels(100), [], asyncio.Event()
        tasks = [
            asyncio.create_task(holder(pixels, n, log, k, gate))
            for k, n in (("a", 80), ("b", 80))
        ]
        await asyncio.sleep(0.01)

        async def text_only():
            async with pixels.hold(0):  # in at once, though b waits
                log.append("text")

        await asyncio.wait_for(text_only(), 1.0)  # TimeoutError when it queued behind b
        assert log == ["a in", "text"]
        gate.set()
        await asyncio.gather(*tasks)

    asyncio.run(run())


def test_a_request_that_leaves_while_waiting_gives_its_place_back():
    """A waiting request cancelled (its timeout, its client gone) is out of the line; the next one gets in."""

    async def run():
        pixels, log, gate = ServerPixels(100), [], asyncio.Event()
        first = asyncio.create_task(holder(pixels, 80, log, "a", gate))
        await asyncio.sleep(0.01)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(
                holder(pixels, 50, log, "late", asyncio.Event()), 0.05
            )
        small = asyncio.create_task(holder(pixels, 20, log, "small", gate))
        await asyncio.sleep(0.01)
        assert (
            log == ["a in", "small in"] and pixels.held == 100
        )  # not stuck behind the one that left
        gate.set()
        await asyncio.gather(first, small)
        assert pixels.held == 0

    asyncio.run(run())


def test_a_request_over_the_whole_budget_is_refused_not_queued_forever():
    async def run():
        async with ServerPixels(100).hold(101):
            pass

    with pytest.raises(ImageTooLargeError, match="--max-server-pixels"):
        asyncio.run(run())


def test_the_setting_must_hold_one_request_at_its_limit():
    assert settings().max_server_pixels == 128_000_000
    with pytest.raises(ConfigError, match="max_server_pixels"):
        settings(max_request_pixels=10, max_server_pixels=9)
    args = build_parser().parse_args(
        ["serve", "--max-request-pixels", "5", "--max-server-pixels", "7"]
    )
    assert settings_from_args(args).max_server_pixels == 7


def test_the_chat_service_holds_a_requests_pixels_until_it_is_encoded(monkeypatch):
    """Two requests of 3 MP each on a 5 MP server: the second decodes only after the first is encoded; each decode
    gets the drafter processor's size rule."""
    log, fits = [], []

    async def fetch(url, s):
        return bomb_png(2000, 1500)

    async def decode(data, s, fit):
        fits.append(fit)
        log.append("decode")
        await asyncio.sleep(0.02)
        return "image"

    async def view(im, c, o):
        return SimpleNamespace(caption=c, ocr=o)

    def encode(request, plan):
        log.append("encoded")
        return "enc"

    monkeypatch.setattr(chat, "fetch_image_bytes", fetch)
    monkeypatch.setattr(chat, "decode_image", decode)
    monkeypatch.setattr(chat, "release_memory", lambda: None)
    monkeypatch.setattr(
        chat, "conversation_request", lambda job, images, views: "request"
    )
    monkeypatch.setattr(chat, "answer_warnings", lambda toy, images: ())
    processor = SimpleNamespace(
        image_processor=SimpleNamespace(
            patch_size=16,
            merge_size=2,
            size={"shortest_edge": 1024, "longest_edge": 16384},
        )
    )
    runner = SimpleNamespace(
        vl=SimpleNamespace(pair=SimpleNamespace(processor=processor))
    )
    service = chat.ChatService(
        settings(max_request_pixels=5_000_000, max_server_pixels=5_000_000),
        runner,
        SimpleNamespace(view=view),
        None,
    )
    monkeypatch.setattr(service, "_encode", encode)
    job = SimpleNamespace(image_urls=["a"], captions=[""], ocrs=[""])

    async def both():
        return await asyncio.gather(
            service._views(job, None), service._views(job, None)
        )

    assert [r[0] for r in asyncio.run(both())] == ["enc", "enc"]
    assert log == [
        "decode",
        "encoded",
        "decode",
        "encoded",
    ]  # never two 3 MP images at once
    assert service.pixels.held == 0
    assert [f((7900, 7900)) for f in fits] == [(128, 128)] * 2


def test_a_waiting_request_of_the_whole_budget_gets_in_when_the_server_empties():
    """A request of exactly --max-server-pixels that arrived while another held pixels waits, then gets in."""

    async def run():
        pixels, log, gate = ServerPixels(100), [], asyncio.Event()
        first = asyncio.create_task(holder(pixels, 30, log, "a", gate))
        whole = asyncio.create_task(holder(pixels, 100, log, "whole", gate))
        await asyncio.sleep(0.01)
        assert log == ["a in"] and pixels.held == 30
        gate.set()
        await asyncio.wait_for(asyncio.gather(first, whole), 1.0)
        assert log == ["a in", "a out", "whole in", "whole out"]
        assert pixels.held == 0

    asyncio.run(run())


def test_a_request_cancelled_just_after_its_pixels_were_granted_gives_them_back():
    """The pixels are granted (the holder leaves) and the waiting request is cancelled before it runs again (its
    timeout, its client gone): they come back, and a request of the whole budget still gets in."""

    async def run():
        pixels, log = ServerPixels(100), []
        async with pixels.hold(80):
            late = asyncio.create_task(holder(pixels, 50, log, "late", asyncio.Event()))
            await asyncio.sleep(0.01)
            assert pixels.held == 80 and not log
        # the 80 are back and the 50 granted; `late` has not run since
        assert pixels.held == 50 and not late.done()
        late.cancel()
        with pytest.raises(asyncio.CancelledError):
            await late
        assert pixels.held == 0 and log == []
        opened = asyncio.Event()
        opened.set()
        await asyncio.wait_for(holder(pixels, 100, log, "whole", opened), 1.0)
        assert log == ["whole in", "whole out"] and pixels.held == 0

    asyncio.run(run())


def test_a_request_cancelled_while_its_place_is_taken_leaves_quietly():
    """A waiting request is cancelled and, before it runs again, the holder leaves (the line passes over its
    cancelled place): it ends cancelled, not with an error, and holds nothing."""

    async def run():
        pixels, log = ServerPixels(100), []
        async with pixels.hold(80):
            late = asyncio.create_task(holder(pixels, 50, log, "late", asyncio.Event()))
            await asyncio.sleep(0.01)
            late.cancel()
        with pytest.raises(asyncio.CancelledError):
            await late
        assert pixels.held == 0 and log == [] and not pixels._waiting

    asyncio.run(run())
