"""asymspec_vl.backends.vllm.vllm_backend on stand-ins (no engine): one engine lookup per request."""

from types import SimpleNamespace

from asymspec_vl.backends.vllm.vllm_backend import VLLMBackend
from asymspec_vl.core.config import AsymSpecConfig
from asymspec_vl.core.methods import METHODS
from asymspec_vl.inputs.prompts import EncodedRequest, EncodedView, Prompts


def test_a_served_request_looks_its_engine_up_once_and_takes_its_room_from_that_engine():
    """served_request made the engine's spec 5 times for one asymspec request (its own, then once per source for
    the room, then once more for the mode): the plan looks it up once, and the request reads every source's
    context from that engine."""
    looked_up = []

    def engine_for(method, K, speculative=False):
        looked_up.append((method.name, K, speculative))
        return "the speculative engine", method.name

    llm = SimpleNamespace(
        llm_engine=SimpleNamespace(
            vllm_config=SimpleNamespace(model_config=SimpleNamespace(max_model_len=40))
        )
    )
    backend = VLLMBackend.__new__(VLLMBackend)
    # one vocabulary
    backend.pair = SimpleNamespace(vmap=SimpleNamespace(identity=True))
    backend.engine_for = engine_for
    backend.engine = {"the speculative engine": llm}.__getitem__
    backend._prompt = lambda r, method: ("prompt", method.name)
    backend._params = lambda r, plan, room: (plan.mode, room)
    comp = EncodedView([1, 2, 3])
    r = EncodedRequest(Prompts("", "", ""), EncodedView(list(range(10))), comp, comp)
    plan = backend.plan_request(
        METHODS["asymspec"], AsymSpecConfig(K=2), speculative=True
    )
    prompt, params = backend.engine_request(r, plan)
    assert looked_up == [("asymspec", 2, True)]
    assert prompt == ("prompt", "asymspec") and plan.mode == "asymspec"
    assert params == (
        "asymspec",
        40 - 10 - 2 - 1,
    )  # the longest view, x_full, K drafts and one token
