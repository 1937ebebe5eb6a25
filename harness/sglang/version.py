"""Reads the single SGLang pin (pin.yaml) so every consumer follows the same version."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

PIN_PATH = Path(__file__).with_name("pin.yaml")


@dataclass(frozen=True)
class SGLangPin:
    version: str
    docker_image: str
    wheel_python_version: str
    wheel_platform: str
    capabilities: dict


@lru_cache(maxsize=1)
def load_pin(path: str | None = None) -> SGLangPin:
    pin_path = Path(path) if path else PIN_PATH
    data = yaml.safe_load(pin_path.read_text())
    try:
        version = data["sglang_version"]
        image = data["docker_image"]
        wheel = data["wheel_download"]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{pin_path}: missing key {exc}") from exc
    if not image.endswith(f":v{version}"):
        raise ValueError(f"{pin_path}: docker_image {image!r} does not match sglang_version {version!r}")
    return SGLangPin(version, image, str(wheel["python_version"]), wheel["platform"],
                     dict(data.get("capabilities") or {}))
