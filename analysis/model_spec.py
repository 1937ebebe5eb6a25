"""Model shapes the analysis needs (layer counts); data lives in analysis/models/*.yaml."""
from __future__ import annotations

import os
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from analysis.errors import ModelSpecError

MODEL_DIR = Path(__file__).parent / "models"


class ModelSpec(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    name: str
    num_layers: int
    first_k_dense_replace: int = 0
    mtp_layers: int = 0


def builtin_models() -> list[str]:
    return sorted(p.stem for p in MODEL_DIR.glob("*.yaml"))


def load_model_spec(name_or_path: str) -> ModelSpec:
    path = Path(name_or_path)
    if not (path.suffix in (".yaml", ".yml") or os.sep in name_or_path):
        path = MODEL_DIR / f"{name_or_path}.yaml"
        if not path.exists():
            raise ModelSpecError(name_or_path, f"no built-in model of that name; built-ins: {', '.join(builtin_models())}")
    if not path.exists():
        raise ModelSpecError(str(path), "file not found")
    try:
        data = yaml.safe_load(path.read_text())
        return ModelSpec(**data)
    except (yaml.YAMLError, TypeError) as exc:
        raise ModelSpecError(str(path), f"not a valid model file: {exc}") from exc
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ModelSpecError(str(path), problems) from None
