"""Model shapes the analysis needs (layer counts); data lives in analysis/data/models/*.yaml."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from analysis.io.data_files import builtin_names, convert, read_mapping, resolve, validation_problems
from analysis.errors import ModelSpecError

MODEL_DIR = Path(__file__).resolve().parent.parent / "data" / "models"


class ModelSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A key the analysis does not know is an error naming it, never silently ignored."""

    name: str
    num_layers: int
    first_k_dense_replace: int = 0  # dense layers first; the rest have experts (checked per step)
    mtp_layers: int = 0
    shapes: dict[str, Any] | None = None  # read by the SOL model (analysis/sol/model_shapes.py)


def builtin_models() -> list[str]:
    return builtin_names(MODEL_DIR)


def load_model_spec(name_or_path: str) -> ModelSpec:
    """A built-in model by name, or a YAML file by path."""
    path = resolve(name_or_path, MODEL_DIR, "model", ModelSpecError)
    data = read_mapping(path, ModelSpecError)
    try:
        return convert(data, ModelSpec)
    except msgspec.ValidationError as exc:
        raise ModelSpecError(str(path), validation_problems(exc)) from None
