"""Model shapes for the speed-of-light model: the `shapes:` mapping of `analysis/data/models/<name>.yaml`.

The same file's top-level keys (num_layers, first_k_dense_replace, mtp_layers) are read by the
layer segmentation; this module only needs them to count dense and MoE layers.
"""
from __future__ import annotations

from pathlib import Path

import msgspec
from analysis.io.data_files import read_yaml_file
from analysis.errors import ModelSpecError

MODELS_DIR = Path(__file__).resolve().parent.parent / "data" / "models"


class ModelShapes(msgspec.Struct, frozen=True):
    name: str
    num_layers: int
    first_k_dense_replace: int
    mtp_layers: int
    hidden_size: int
    vocab_size: int
    num_attention_heads: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    moe_intermediate_size: int
    n_routed_experts: int
    num_experts_per_tok: int
    n_shared_experts: int
    n_group: int
    topk_group: int
    intermediate_size: int
    weight_block_size: int

    @property
    def moe_layers(self) -> int:
        return self.num_layers - self.first_k_dense_replace


_TOP_KEYS = ("name", "num_layers", "first_k_dense_replace", "mtp_layers")


def load_model_shapes(name_or_path: str = "deepseek-v3") -> ModelShapes:
    path = Path(name_or_path)
    if not path.suffix:
        path = MODELS_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in MODELS_DIR.glob("*.yaml")))
        raise ModelSpecError(str(name_or_path), f"no such file; built-ins: {known}")
    raw = read_yaml_file(path, object, ModelSpecError)
    if not isinstance(raw, dict) or not isinstance(raw.get("shapes"), dict):
        raise ModelSpecError(str(path), "needs a top-level mapping with a `shapes:` mapping")
    fields = {key: raw.get(key) for key in _TOP_KEYS}
    fields.update(raw["shapes"])
    missing = [f for f in ModelShapes.__struct_fields__ if fields.get(f) is None]
    if missing:
        raise ModelSpecError(str(path), f"missing keys: {', '.join(missing)}")
    unknown = sorted(set(raw["shapes"]) - set(ModelShapes.__struct_fields__))
    if unknown:
        raise ModelSpecError(str(path), f"unknown shapes keys: {', '.join(unknown)}")
    try:
        return msgspec.convert(fields, ModelShapes)
    except msgspec.ValidationError as exc:
        raise ModelSpecError(str(path), str(exc)) from exc
