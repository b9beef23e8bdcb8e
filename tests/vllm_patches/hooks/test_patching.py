"""vllm_patches.hooks._patching: wrap / unwrap restore exactly what a class held."""

from vllm_patches.hooks._patching import install, is_patched, unwrap


def _hook(original, self):
    return ("hooked", original(self))


class Drafter:
    def step(self):
        return "drafter"


class VlDrafter(Drafter):  # inherits step: no own attribute
    pass


def test_unwrap_of_an_inherited_method_leaves_no_own_attribute():
    before = dict(vars(VlDrafter))
    install(VlDrafter, "step", _hook)
    assert is_patched(VlDrafter.__dict__["step"])
    assert VlDrafter().step() == ("hooked", "drafter")
    unwrap(VlDrafter, "step")
    assert dict(vars(VlDrafter)) == before and "step" not in vars(VlDrafter)
    original = Drafter.step
    try:  # a later change of the parent reaches the subclass again
        Drafter.step = lambda self: "parent changed"
        assert VlDrafter().step() == "parent changed"
    finally:
        Drafter.step = original


def test_unwrap_of_an_own_method_restores_the_original():
    class Verifier:
        def step(self):
            return "verifier"

    own = Verifier.__dict__["step"]
    install(Verifier, "step", _hook)
    assert Verifier().step() == ("hooked", "verifier")
    unwrap(Verifier, "step")
    assert Verifier.__dict__["step"] is own and Verifier().step() == "verifier"
    unwrap(Verifier, "step")  # not wrapped: nothing happens
    assert Verifier.__dict__["step"] is own
