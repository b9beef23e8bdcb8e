"""asymspec_vl.backends.vllm.engine.build_engine's engine arguments on the CPU build: a compiled engine gets the
inductor setting its drafter's compilation needs there; an eager one, or a caller's own compilation config, not."""

import pytest

from asymspec_vl.backends.vllm import engine


@pytest.fixture
def built(monkeypatch):
    import vllm

    seen = {}
    monkeypatch.setattr(engine, "on_cpu", lambda: True)
    monkeypatch.setattr(
        vllm, "LLM", lambda model, **kwargs: seen.update(kwargs) or "llm"
    )

    def build(**engine_kwargs):
        seen.clear()
        assert (
            engine.build_engine(
                engine.EngineSpec("m", "d", 2), "float32", 1, engine_kwargs
            )
            == "llm"
        )
        return dict(seen)

    return build


def test_a_compiled_cpu_engine_compiles_without_inductors_indirect_index_asserts(built):
    assert built(enforce_eager=False)["compilation_config"] == engine.CPU_COMPILATION
    assert (
        engine.CPU_COMPILATION["inductor_compile_config"]["assert_indirect_indexing"]
        is False
    )


def test_eager_engines_and_a_callers_compilation_config_are_left_alone(built):
    assert "compilation_config" not in built()  # the CPU default is eager
    own = {"mode": 0}
    assert (
        built(enforce_eager=False, compilation_config=own)["compilation_config"] is own
    )
