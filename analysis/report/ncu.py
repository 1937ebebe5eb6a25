"""Read Nsight Compute raw CSV exports and classify kernels as compute / memory bound or balanced.

Layout of `ncu --csv --page raw`: a header row of column names (ID, Kernel Name, ..., then one
column per metric), a row of units, then one row per profiled kernel launch. ncu may print
`==PROF==` lines first, and may group digits ("1,234.5"); both are handled.
"""
from __future__ import annotations

import csv
import io
import re
import statistics
import zlib
from pathlib import Path

import msgspec

from analysis.report.demangle import demangle
from analysis.io.data_files import read_yaml_file
from analysis.errors import AnalysisError
from analysis.io.input_files import DOCUMENT_LIMIT_BYTES, MIB, InputFileError, read_input
from analysis.sol.hardware import Hardware

METRICS_FILE = Path(__file__).parent / "ncu_metrics.yaml"
CLASSES = ("compute-bound", "memory-bound", "balanced")
UNKNOWN = "unknown"

_TIME_SCALE_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}
_BYTE_SCALE = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
               "kibyte": 1024, "mibyte": 1024**2, "gibyte": 1024**3}
_RATE_SCALE = {"byte/second": 1, "kbyte/second": 1e3, "mbyte/second": 1e6, "gbyte/second": 1e9, "tbyte/second": 1e12,
               "byte/s": 1, "kb/s": 1e3, "mb/s": 1e6, "gb/s": 1e9, "tb/s": 1e12}


class NcuCsvError(AnalysisError):
    def __init__(self, path: str, problem: str):
        super().__init__(f"ncu export {path}: {problem}")


class NcuKernel(msgspec.Struct):
    """One profiled launch: named quantities in normalised units (us, %, bytes, bytes/s, FLOPs)."""

    id: str
    name: str  # demangled when the export has mangled symbols (`moe-harness ncu`), so it matches trace names
    values: dict[str, float]
    flops: float | None
    dram_bytes: float | None
    intensity: float | None = None  # FLOP per DRAM byte
    flops_per_s: float | None = None
    classification: str = UNKNOWN
    rule: str = ""  # roofline+throughput | throughput-only | missing metrics
    # False when the export has no tensor-core operation counters: `flops` then counts only FMA/ADD/MUL
    # pipe instructions, so GEMM intensity is a lower bound (docs/gpu-runs.md).
    tensor_flops_counted: bool = False
    symbol: str = ""  # the name exactly as exported (the mangled symbol ncu's --kernel-name filter matches)


class MetricConfig(msgspec.Struct, frozen=True):
    quantities: dict[str, list[str]]
    flop_metrics: dict[str, float]
    tensor_flop_regex: str
    margin_pct: float


def load_metric_config(path: str | None = None) -> MetricConfig:
    raw = read_yaml_file(Path(path or METRICS_FILE), dict)
    return MetricConfig(
        quantities={k: list(v) for k, v in raw["quantities"].items()},
        flop_metrics={k: float(v) for k, v in raw["flop_metrics"].items()},
        tensor_flop_regex=raw.get("tensor_flop_metric_regex", r"^$"),
        margin_pct=float(raw["classification"]["margin_pct"]),
    )


def _number(text: str) -> float | None:
    text = (text or "").strip().replace(",", "")
    if not text or text.lower() in ("n/a", "nan", "-"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _scaled(value: float | None, unit: str, quantity: str) -> float | None:
    if value is None:
        return None
    unit = unit.strip().lower()  # known: _check_units refused any other
    if quantity.endswith("_us"):
        return value * _TIME_SCALE_US[unit]
    if quantity.endswith("_bytes"):
        return value * _BYTE_SCALE[unit]
    if quantity.endswith("_per_s"):
        return value * _RATE_SCALE[unit]
    return value


def _export_text(path: Path) -> str:
    """The export's text (a .gz inflated), both bounded by DOCUMENT_LIMIT_BYTES; names stay readable
    when a byte is not UTF-8 (shown as U+FFFD)."""
    try:
        data = read_input(path, DOCUMENT_LIMIT_BYTES, "an ncu export")
    except InputFileError as exc:
        raise NcuCsvError(exc.path, exc.problem) from None
    if path.name.endswith(".gz"):
        inflater = zlib.decompressobj(wbits=47)
        try:
            data = inflater.decompress(data, DOCUMENT_LIMIT_BYTES + 1)
        except zlib.error as exc:
            raise NcuCsvError(str(path), f"corrupt gzip data: {exc}") from None
        if len(data) > DOCUMENT_LIMIT_BYTES:
            raise NcuCsvError(str(path), f"inflates to more than {DOCUMENT_LIMIT_BYTES // MIB} MiB, the most this "
                                         "reads (docs/analysis.md, bounds)")
        if not inflater.eof:
            raise NcuCsvError(str(path), "truncated gzip file (the compressed stream ends early)")
    return data.decode("utf-8", errors="replace")


_UNITS_OF = {"_us": _TIME_SCALE_US, "_bytes": _BYTE_SCALE, "_per_s": _RATE_SCALE, "_pct": {"%": 1.0, "": 1.0}}
_COUNT_UNITS = ("", "inst")  # FLOP counters: SASS instructions or tensor operations, never scaled


def _check_units(path: str, header: list[str], units: list[str], col: dict[str, int], config: MetricConfig,
                 tensor_cols: list[str], line_no: int) -> None:
    """The row under the header must be the units row (a kernel row there would be read as units and
    its numbers left unscaled), and every metric read must carry a unit this reader knows how to scale:
    an unknown one is an error naming the column, never a factor of 1 (ns read as us is x1000)."""
    if len(units) != len(header):
        raise NcuCsvError(path, f"line {line_no}: the units row has {len(units)} fields, the header {len(header)}")
    if "ID" in col and units[col["ID"]].strip():
        raise NcuCsvError(path, f"line {line_no}: no units row under the header (ID {units[col['ID']]!r} there is a "
                                "kernel's): export with --csv --page raw, which writes one")
    read = [(metric, quantity) for quantity, metrics in config.quantities.items() for metric in metrics if metric in col]
    read += [(metric, "flops") for metric in [*config.flop_metrics, *tensor_cols] if metric in col]
    for metric, quantity in read:
        unit = units[col[metric]].strip()
        known = next((scale for suffix, scale in _UNITS_OF.items() if quantity.endswith(suffix)), None)
        allowed = _COUNT_UNITS if known is None else known
        if unit.lower() not in allowed:
            raise NcuCsvError(path, f"line {line_no}: column {metric}: unknown unit {unit!r} (known: "
                                    f"{', '.join(repr(u) for u in allowed)})")


def read_ncu_csv(path: str | Path, config: MetricConfig | None = None) -> list[NcuKernel]:
    """Parse an export (.csv, or .csv.gz); raise NcuCsvError naming the file and what is missing."""
    config = config or load_metric_config()
    path = Path(path)
    lines = _export_text(path).splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"') or line.startswith("ID,")), None)
    if start is None:
        raise NcuCsvError(str(path), "no header row starting with \"ID\" (export with --csv --page raw)")
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    if len(rows) < 2:
        raise NcuCsvError(str(path), "header but no units row")
    header, units = rows[0], rows[1]
    if "Kernel Name" not in header:
        raise NcuCsvError(str(path), "no 'Kernel Name' column")
    col = {name: i for i, name in enumerate(header)}
    tensor_re = re.compile(config.tensor_flop_regex)
    tensor_cols = [name for name in header if tensor_re.match(name)]
    _check_units(str(path), header, units, col, config, tensor_cols, start + 2)
    kernels = []
    for line_no, row in enumerate(rows[2:], start=start + 3):
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise NcuCsvError(str(path), f"line {line_no}: {len(row)} fields, header has {len(header)}")
        values: dict[str, float] = {}
        for quantity, metrics in config.quantities.items():
            for metric in metrics:
                if metric in col:
                    value = _scaled(_number(row[col[metric]]), units[col[metric]], quantity)
                    if value is not None:
                        values[quantity] = value
                        break
        flop_terms = [(w, _number(row[col[m]])) for m, w in config.flop_metrics.items() if m in col]
        flop_terms += [(1.0, _number(row[col[m]])) for m in tensor_cols]
        present = [w * v for w, v in flop_terms if v is not None]
        flops = sum(present) if present else None
        read, write = values.get("dram_read_bytes"), values.get("dram_write_bytes")
        dram = (read or 0.0) + (write or 0.0) if read is not None or write is not None else None
        exported = row[col["Kernel Name"]]
        kernels.append(NcuKernel(id=row[col["ID"]] if "ID" in col else str(line_no), name=demangle(exported),
                                 values=values, flops=flops, dram_bytes=dram, tensor_flops_counted=bool(tensor_cols),
                                 symbol=exported))
    if not kernels:
        raise NcuCsvError(str(path), "no kernel rows")
    return kernels


def ridge_point(hw: Hardware, dtype: str = "bf16") -> float:
    """FLOP per byte where the compute roof meets the HBM roof."""
    return hw.flops_per_s(dtype) / hw.peak("hbm_bytes_per_s")


def classify(kernels: list[NcuKernel], hw: Hardware, dtype: str = "bf16", margin_pct: float | None = None) -> list[NcuKernel]:
    """Label each kernel compute-bound / memory-bound / balanced (in place; returns the list)."""
    margin = load_metric_config().margin_pct if margin_pct is None else margin_pct
    ridge = ridge_point(hw, dtype)
    for k in kernels:
        sm, mem = k.values.get("sm_throughput_pct"), k.values.get("mem_throughput_pct")
        dur = k.values.get("duration_us")
        if k.flops is not None and k.dram_bytes:
            k.intensity = k.flops / k.dram_bytes
        if k.flops is not None and dur:
            k.flops_per_s = k.flops / (dur * 1e-6)
        if sm is None or mem is None:
            k.classification, k.rule = UNKNOWN, "missing SM or memory throughput"
            continue
        mem_led, sm_led = mem - sm >= margin, sm - mem >= margin
        if k.intensity is None:
            k.rule = "throughput-only"
            k.classification = "memory-bound" if mem_led else "compute-bound" if sm_led else "balanced"
            continue
        k.rule = "roofline+throughput"
        if k.intensity < ridge and mem_led:
            k.classification = "memory-bound"
        elif k.intensity >= ridge and sm_led:
            k.classification = "compute-bound"
        else:
            k.classification = "balanced"
    return kernels


SUMMARY_QUANTITIES = ("sm_throughput_pct", "dram_throughput_pct", "mem_throughput_pct", "achieved_occupancy_pct",
                      "l1tex_hit_rate_pct", "l2_hit_rate_pct", "duration_us")


def class_means(kernels: list[NcuKernel]) -> dict[str, dict[str, float | None]]:
    """Unweighted mean of each summary quantity per class, plus 'overall'."""
    groups = {c: [k for k in kernels if k.classification == c] for c in CLASSES}
    groups["overall"] = list(kernels)
    out: dict[str, dict[str, float | None]] = {}
    for cls, members in groups.items():
        out[cls] = {}
        for q in SUMMARY_QUANTITIES:
            vals = [k.values[q] for k in members if q in k.values]
            out[cls][q] = statistics.fmean(vals) if vals else None
    return out


def class_counts(kernels: list[NcuKernel]) -> dict[str, int]:
    counts = {c: 0 for c in (*CLASSES, UNKNOWN)}
    for k in kernels:
        counts[k.classification] = counts.get(k.classification, 0) + 1
    return counts


def ncu_launches(path: str | Path) -> list[tuple[str, float]]:
    """(kernel symbol, duration us) of every launch in an ncu CSV export, in launch order: what the
    `ncu` command ranks a scan by and counts a detail pass's coverage with (read_ncu_csv)."""
    return [(k.symbol, k.values.get("duration_us", 0.0)) for k in read_ncu_csv(path)]
