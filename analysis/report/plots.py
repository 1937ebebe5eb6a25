"""PNG plots for the kernel report: metric histograms and roofline scatters (matplotlib, Agg).

Each function returns PNG bytes, so callers can both write files and embed them in HTML.
matplotlib is imported lazily: the rest of the analysis does not need it.
"""
from __future__ import annotations

import io

from analysis.sol.hardware import Hardware
from analysis.report.ncu import NcuKernel, ridge_point

CLASS_COLOURS = {"compute-bound": "#d62728", "memory-bound": "#1f77b4", "balanced": "#2ca02c", "unknown": "#7f7f7f"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    _pyplot().close(fig)
    return buffer.getvalue()


def histogram_png(values: list[float], title: str, xlabel: str, bins: int = 20) -> bytes:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.4))
    ax.hist(values, bins=bins, color="#4c72b0", edgecolor="white")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("kernels")
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def _with_roofline_points(kernels: list[NcuKernel]) -> list[NcuKernel]:
    return [k for k in kernels if k.intensity and k.flops_per_s and k.intensity > 0 and k.flops_per_s > 0]


def roofline_png(kernels: list[NcuKernel], hw: Hardware, dtype: str = "bf16", normalised: bool = False) -> bytes:
    """Achieved FLOP/s against arithmetic intensity (FLOP per DRAM byte), log-log, with roofs.

    normalised: x in units of the ridge point and y as a fraction of the compute peak, so the
    roof is min(1, x) whatever the GPU.
    """
    plt = _pyplot()
    peak, bandwidth, ridge = hw.flops_per_s(dtype), hw.peak("hbm_bytes_per_s"), ridge_point(hw, dtype)
    points = _with_roofline_points(kernels)
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    xs = [k.intensity / ridge if normalised else k.intensity for k in points]
    ys = [k.flops_per_s / peak if normalised else k.flops_per_s for k in points]
    lo = min([*xs, (ridge if not normalised else 1.0) / 1000])
    hi = max([*xs, (ridge if not normalised else 1.0) * 100])
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    roof = [min(1.0, x) for x in grid] if normalised else [min(peak, x * bandwidth) for x in grid]
    ax.plot(grid, roof, color="black", linewidth=1.5, label=f"roof ({dtype}, HBM)")
    ax.axvline(1.0 if normalised else ridge, color="grey", linestyle=":", linewidth=1)
    for cls, colour in CLASS_COLOURS.items():
        sel = [(x, y) for x, y, k in zip(xs, ys, points) if k.classification == cls]
        if sel:
            ax.scatter([x for x, _ in sel], [y for _, y in sel], s=28, color=colour, label=cls, alpha=0.85)
    ax.set_xscale("log")
    ax.set_yscale("log")
    if normalised:
        ax.set_xlabel("arithmetic intensity / ridge point")
        ax.set_ylabel("achieved FLOP/s / peak")
        ax.set_title(f"Roofline (normalised), {hw.name}")
    else:
        ax.set_xlabel("arithmetic intensity (FLOP / DRAM byte)")
        ax.set_ylabel("achieved FLOP/s")
        ax.set_title(f"Roofline, {hw.name}: {peak / 1e12:.0f} TFLOP/s {dtype}, {bandwidth / 1e12:.2f} TB/s")
    ax.grid(which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="lower right")
    return _png(fig)
