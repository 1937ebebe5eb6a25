"""Hardware peaks as data: load `analysis/data/hardware/<name>.yaml` (or a path) into typed figures.

Every figure keeps its source and whether it was measured, so a report can say how much to
trust a speed-of-light number.
"""
from __future__ import annotations

from pathlib import Path

import msgspec

from analysis.io.data_files import builtin_names, read_mapping, resolve
from analysis.errors import AnalysisError

HARDWARE_DIR = Path(__file__).resolve().parent.parent / "data" / "hardware"
PEAK_KEYS = ("bf16_flops_per_s", "fp8_flops_per_s", "hbm_bytes_per_s", "nvlink_bytes_per_s", "rdma_bytes_per_s")


class HardwareSpecError(AnalysisError):
    def __init__(self, source: str, problem: str):
        super().__init__(f"hardware spec {source}: {problem}")


class Peak(msgspec.Struct, frozen=True):
    value: float
    source: str
    measured: bool


class Hardware(msgspec.Struct, frozen=True):
    name: str
    gpus_per_node: int
    peaks: dict[str, Peak]

    def peak(self, key: str) -> float:
        return self.peaks[key].value

    def flops_per_s(self, dtype: str) -> float:
        """Dense tensor-core peak for a compute dtype (fp8 or bf16)."""
        if dtype not in ("fp8", "bf16"):
            raise HardwareSpecError(self.name, f"no compute peak for dtype {dtype!r} (known: fp8, bf16)")
        return self.peak(f"{dtype}_flops_per_s")


def list_hardware() -> list[str]:
    return builtin_names(HARDWARE_DIR)


def load_hardware(name_or_path: str) -> Hardware:
    """A built-in name (h800, H200, b200 ...) or a YAML path."""
    is_name = not (Path(name_or_path).suffix or "/" in name_or_path)
    path = resolve(name_or_path.lower() if is_name else name_or_path, HARDWARE_DIR, "hardware", HardwareSpecError)
    raw = read_mapping(path, HardwareSpecError)
    for key in ("name", "gpus_per_node", "peaks"):
        if key not in raw:
            raise HardwareSpecError(str(path), f"missing key {key!r}")
    peaks: dict[str, Peak] = {}
    for key in PEAK_KEYS:
        entry = raw["peaks"].get(key) if isinstance(raw["peaks"], dict) else None
        if not isinstance(entry, dict) or "value" not in entry or "source" not in entry:
            raise HardwareSpecError(str(path), f"peaks.{key} needs value and source")
        try:
            value = float(entry["value"])  # PyYAML reads 989.5e12 as a string; accept it
        except (TypeError, ValueError):
            raise HardwareSpecError(str(path), f"peaks.{key}.value is not a number: {entry['value']!r}") from None
        if value <= 0:
            raise HardwareSpecError(str(path), f"peaks.{key}.value must be positive")
        peaks[key] = Peak(value=value, source=str(entry["source"]), measured=bool(entry.get("measured", False)))
    return Hardware(name=str(raw["name"]), gpus_per_node=int(raw["gpus_per_node"]), peaks=peaks)
