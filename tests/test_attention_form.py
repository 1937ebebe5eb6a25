"""Which attention form the module-range namer reads from an attention module's children.

Synthetic module ranges (named so here: no stack recording of SGLang's MHA prefill path exists), one
attention module each, whose children and their order are written out from the model code: SGLang's
DeepSeek MHA path (fused q_a/kv_a, q_a layernorm, q_b, kv_a layernorm, rotary, kv_b, the core) and
Qwen3's attention (q, q_norm, k, k_norm, v, then the rotary). The structural namer's reading of the
same forms is held by real prefill traces in tests/test_two_batch_prefill.py and the accuracy suite.
"""
from __future__ import annotations

import pytest

from analysis.attribution.module_roles import ModuleRoleNamer, RangeForest, standard_map
from analysis.ingest.trace_model import Range


def _roles(children: list[str]) -> list[str]:
    """Roles of an attention module's children, each 10 us long, one after the other."""
    ranges = [Range("DeepseekV2DecoderLayer", 0.0, 1000.0, 1),
              Range("DeepseekV2AttentionMLA", 1.0, 900.0, 1)]
    ranges += [Range(name, 10.0 + 20 * i, 10.0, 1) for i, name in enumerate(children)]
    forest = RangeForest(ranges, [], standard_map())
    attention = next(i for i, n in enumerate(forest.nodes) if n.cls == "DeepseekV2AttentionMLA")
    roles = ModuleRoleNamer(forest).attention_child_roles(attention, None)
    return [roles.get(forest.nodes[attention].children[i], "") for i in range(len(children))]


@pytest.mark.parametrize("children, expected", [
    (["ReplicatedLinear", "RMSNorm", "ColumnParallelLinear", "RMSNorm", "DeepseekScalingRotaryEmbedding",
      "ColumnParallelLinear", "RadixAttention", "RowParallelLinear"],
     ["q_a_kv_a", "q_a_layernorm", "q_b_proj", "kv_a_layernorm", "rotary_emb", "kv_b_proj", "attn_core", "o_proj"]),
    (["ColumnParallelLinear", "RMSNorm", "ColumnParallelLinear", "RMSNorm", "ColumnParallelLinear",
      "RotaryEmbedding", "RadixAttention", "RowParallelLinear"],
     ["qkv_proj", "qk_norm", "qkv_proj", "qk_norm", "qkv_proj", "rotary_emb", "attn_core", "o_proj"]),
], ids=["sglang-mla-mha-prefill", "qwen3-qk-norm"])
def test_two_norms_among_three_projections_read_by_where_the_rotary_runs(children, expected):
    assert _roles(children) == expected
