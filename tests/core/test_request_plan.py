"""One plan per request (asymspec_vl/core/request_plan.py, issue 36 item 3): counted on the real code path with the
tiny models, a library `vl.generate(...)` and a served chat completion each make exactly one RequestPlan and look
their vLLM engine up at most once (VLLMBackend.engine_for; it ran 5 times for a library asymspec request and 3 times
for a served one), and the result reports the plan that ran."""

import asyncio
import io

import pytest
from helpers import random_image
from serve_support import chat_body, data_url

from asymspec_vl.backends.vllm.vllm_backend import VLLMBackend
from asymspec_vl.core.config import AsymSpecConfig
from asymspec_vl.core.methods import METHODS
from asymspec_vl.core.request_plan import RequestPlan

QUESTION = "What is the value of the largest bar?"
CAPTION = "a figure with shapes and a bar chart"


@pytest.fixture
def counted(monkeypatch):
    """(plans made, engine lookups): each RequestPlan construction by method name, each VLLMBackend.engine_for call
    by (method, K, speculative); the real functions run."""
    made, looked_up = [], []
    init, engine_for = RequestPlan.__init__, VLLMBackend.engine_for

    def counting_init(self, method, *rest, **kw):
        made.append(method.name)
        init(self, method, *rest, **kw)

    def counting_engine_for(self, method, K, speculative=False):
        looked_up.append((getattr(method, "name", method), K, speculative))
        return engine_for(self, method, K, speculative)

    monkeypatch.setattr(RequestPlan, "__init__", counting_init)
    monkeypatch.setattr(VLLMBackend, "engine_for", counting_engine_for)
    return made, looked_up


def library_request(vl):
    return vl.generate(
        random_image(0), QUESTION, caption=CAPTION, max_new_tokens=4, K=2
    )


def served_request(runner, settings, loop):
    """One chat completion through the server's ChatService on `runner` (its prepare, then its answer), on the
    event loop the runner's engines were started for."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    from asymspec_vl.serve.captioning import ViewMaker
    from asymspec_vl.serve.chat import ChatService
    from asymspec_vl.serve.metrics import ServeMetrics
    from asymspec_vl.serve.translate import translate

    png = io.BytesIO()
    random_image(0).save(png, format="PNG")
    body = chat_body(
        QUESTION, data_url(png.getvalue()), max_tokens=4, caption=CAPTION, ocr=""
    )
    job = translate(ChatCompletionRequest.model_validate(body), settings)
    service = ChatService(settings, runner, ViewMaker(None), ServeMetrics())

    async def answer():
        return await service.answer(await service.prepare(job), "asymspec-vl")

    return loop.run_until_complete(answer())


def close_on(loop, runner) -> None:
    """The runner shut down inside its event loop (as the server's lifespan does), then the loop's last tasks (vLLM's
    output handler) cancelled and the loop closed."""

    async def shut():
        runner.close()
        left = asyncio.all_tasks() - {asyncio.current_task()}
        for task in left:
            task.cancel()
        await asyncio.gather(*left, return_exceptions=True)

    loop.run_until_complete(shut())
    loop.close()


def test_a_plan_reseeded_keeps_its_engine_method_and_K():
    plan = RequestPlan(METHODS["sd"], AsymSpecConfig(K=3, seed=1), "engine", "sd")
    again = plan.with_seed(7)
    assert (again.engine, again.mode, again.method, again.K, again.cfg.seed) == (
        "engine",
        "sd",
        METHODS["sd"],
        3,
        7,
    )
    assert again.cfg == plan.cfg.replace(seed=7)


def test_a_library_request_on_transformers_makes_one_plan_and_reports_it(
    tiny_vl, counted
):
    made, _ = counted
    result = library_request(tiny_vl)
    assert made == ["asymspec"]
    assert (result.method, result.config) == (
        "asymspec",
        AsymSpecConfig(K=2, max_new_tokens=4),
    )


def test_a_served_request_on_transformers_makes_one_plan(tiny_models, counted):
    from asymspec_vl import AsymSpecVL
    from asymspec_vl.serve.hf_runner import HFRunner
    from asymspec_vl.serve.settings import ServeSettings

    paths = dict(
        drafter=str(tiny_models["vl_drafter"]), verifier=str(tiny_models["verifier"])
    )
    runner = HFRunner(AsymSpecVL.from_pretrained(**paths, device="cpu"))
    made, _ = counted
    loop = asyncio.new_event_loop()
    try:
        settings = ServeSettings(**paths, backend="hf", K=2)
        reply = served_request(runner, settings, loop)
    finally:
        runner.close()
        loop.close()
    assert made == ["asymspec"]
    assert (reply.asymspec["method"], reply.asymspec["config"]["K"]) == ("asymspec", 2)


@pytest.mark.vllm
def test_a_library_request_on_vllm_makes_one_plan_and_looks_its_engine_up_once(
    tiny_models, counted
):
    from asymspec_vl import AsymSpecVL

    vl = AsymSpecVL.from_pretrained(
        drafter=str(tiny_models["vl_drafter"]),
        verifier=str(tiny_models["verifier"]),
        backend="vllm",
        block_size=16,
    )
    made, looked_up = counted
    try:
        result = library_request(vl)
    finally:
        vl.close()
    assert (made, looked_up) == (["asymspec"], [("asymspec", 2, False)]), (
        f"{len(made)} plans, {len(looked_up)} engine lookups: {looked_up}"
    )
    assert result.finish_reason in ("stop", "length") and result.method == "asymspec"


@pytest.mark.vllm
def test_a_served_request_on_vllm_makes_one_plan_and_looks_its_engine_up_once(
    tiny_models, counted
):
    from asymspec_vl.serve.settings import ServeSettings
    from asymspec_vl.serve.vllm_runner import VLLMRunner

    settings = ServeSettings(
        str(tiny_models["vl_drafter"]),
        str(tiny_models["verifier"]),
        K=2,
        engine_kwargs={"block_size": 16},
    )
    made, looked_up = counted

    async def load():
        return await asyncio.to_thread(
            VLLMRunner.load, settings, asyncio.get_running_loop()
        )

    loop = asyncio.new_event_loop()
    runner = loop.run_until_complete(load())
    try:
        (
            made.clear(),
            looked_up.clear(),
        )  # the server's start looked up each method's engine once
        reply = served_request(runner, settings, loop)
    finally:
        close_on(loop, runner)
    assert (made, looked_up) == (["asymspec"], [("asymspec", 2, True)]), (
        f"{len(made)} plans, {len(looked_up)} engine lookups: {looked_up}"
    )
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert reply.asymspec["method"] == "asymspec"
