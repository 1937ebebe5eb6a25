"""The embedded engine and the recording scripts hand the KV cache to transformers under the name the
installed release takes (harness/engines/embedded/cache_keyword.py): `cache` from 5.24 on, where
`past_key_values` warns and goes in 5.40, and `past_key_values` before. A name the forward does not
know would land in its **kwargs and the cache would silently stay empty, so the engine tests below
check the cache really fills."""
from __future__ import annotations

import functools
import inspect
import warnings

import pytest

from harness.engines.embedded.cache_keyword import cache_keyword


def test_the_keyword_follows_the_forward_signature():
    def new_forward(self, input_ids=None, cache=None, use_cache=None, **kwargs):
        pass

    def old_forward(self, input_ids=None, past_key_values=None, use_cache=None, **kwargs):
        pass

    @functools.wraps(new_forward)
    def deprecating_wrapper(*args, **kwargs):  # as transformers' deprecate_kwarg wraps a forward
        return new_forward(*args, **kwargs)

    assert cache_keyword(new_forward) == "cache"
    assert cache_keyword(old_forward) == "past_key_values"
    assert cache_keyword(deprecating_wrapper) == "cache"


def _no_cache_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "past_key_values" in str(w.message)]


def test_the_engine_fills_its_cache_without_a_deprecation_warning():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from harness.engines.embedded.engine import DecodeEngine
    from harness.scenario import load_embedded_presets

    config = dict(load_embedded_presets()["tiny-cpu"]["config"], num_hidden_layers=2)
    engine = {"device": "cpu", "dtype": "float32", "experts_implementation": "grouped_mm",
              "attn_implementation": "sdpa", "threads": 1, "seed": 0}
    workload = {"batch_size": 2, "input_len": 8, "output_len": 6}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        decoder = DecodeEngine(engine, config, workload)
        decoder.prefill()
        step_ms = decoder.decode(3)
    assert _no_cache_warnings(caught) == []
    assert len(step_ms) == 3
    # the prompt and every decoded token are in the cache: it was used, not dropped into **kwargs
    assert decoder.cache.get_seq_length() == workload["input_len"] + 3


def test_the_installed_release_is_asked_by_its_models_signature():
    pytest.importorskip("transformers")
    from transformers import DeepseekV3ForCausalLM
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    for forward in (DeepseekV3ForCausalLM.forward, DeepseekV3Attention.forward):
        names = inspect.signature(forward).parameters
        assert cache_keyword(forward) in names
