"""The kernel-level report: top kernels, library shares, speed of light, what-if, Nsight Compute.

Builds a list of document blocks (analysis.report.report_doc) from already computed pieces, so each
piece stays testable alone; write_report renders Markdown (PNGs beside it) and one HTML file
with the PNGs embedded.
"""
from __future__ import annotations

from pathlib import Path

import msgspec

from analysis.io.atomic_files import write_atomically
from analysis.sol.hardware import Hardware
from analysis.report.ncu import CLASSES, UNKNOWN, NcuKernel, class_counts, class_means, ridge_point
from analysis.report.report_doc import Block, Code, Heading, Image, Para, Table, code, literal, to_html, to_markdown
from analysis.sol.estimate import D4Sol, Deployment, StepSol
from analysis.report.sol_vs_ncu import RowCheck
from analysis.report.top_kernels import TopKernelsResult
from analysis.report.whatif import WhatIf
from analysis.tables.shown_names import with_shown_names

REPORT_STEM = "kernel_report"

HISTOGRAMS = [  # quantity, title, axis label
    ("sm_throughput_pct", "SM throughput", "% of peak"),
    ("dram_throughput_pct", "DRAM throughput", "% of peak"),
    ("mem_throughput_pct", "Memory throughput", "% of peak"),
    ("dram_bytes_per_s", "DRAM bandwidth", "GB/s"),
    ("l1tex_hit_rate_pct", "L1/TEX hit rate", "%"),
    ("l1tex_throughput_pct", "L1/TEX throughput", "% of peak"),
    ("l2_hit_rate_pct", "L2 hit rate", "%"),
    ("l2_throughput_pct", "L2 throughput", "% of peak"),
    ("achieved_occupancy_pct", "Achieved occupancy", "%"),
    ("theoretical_occupancy_pct", "Theoretical occupancy", "%"),
    ("duration_us", "Kernel duration", "us"),
    ("mem_busy_pct", "Memory busy", "%"),
    ("max_bandwidth_pct", "Max bandwidth", "% of peak"),
]


class ReportInputs(msgspec.Struct):
    title: str
    sources: list[str]
    top: TopKernelsResult
    sol_rows: list[D4Sol] | None = None
    step_sol: StepSol | None = None
    deployment: Deployment | None = None
    hardware: Hardware | None = None
    step_ms: float | None = None
    what_ifs: list[WhatIf] | None = None  # each row at its SOL
    speedup: float = 2.0
    speedup_what_ifs: list[WhatIf] | None = None  # each row `speedup` times faster
    ncu: list[NcuKernel] | None = None
    ncu_dtype: str = "bf16"
    sol_checks: list[RowCheck] | None = None  # model SOL per D4 row next to ncu's figures for its kernels
    notes: list[str] = []


def _f(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def _top_blocks(top: TopKernelsResult) -> list[Block]:
    blocks: list[Block] = [Heading(2, "Top kernels by total time")]
    blocks.append(Para("Per stage, kernels are grouped by full signature and ranked by summed duration. Time % is "
                       "the share of all kernel time in that stage (streams summed, so overlapped kernels both "
                       "count). 'If 2x faster' is the stage's kernel time if only this kernel ran twice as fast."))
    for stage, rows in top.top.items():
        total = top.stage_total_us[stage]
        blocks.append(Heading(3, f"Stage: {literal(stage)} ({top.stage_steps[stage]} step windows, "
                                 f"{total / 1000:,.2f} ms of kernel time)"))
        blocks.append(Table(
            ["#", "Time %", "Total us", "Count", "Per step", "Mean us", "Median us", "If 2x faster", "Library", "Kernel"],
            [[str(k.rank), f"{k.share_pct:.1f}%", _f(k.total_us), str(k.count), _f(k.per_step, 1), _f(k.mean_us, 2),
              _f(k.median_us, 2), f"-{k.share_pct / 2:.1f}%", k.family, k.readable] for k in rows],
        ))
        fams = top.families[stage]
        blocks.append(Table(["Library", "Time %", "Total us", "Distinct kernels"],
                            [[f.family, f"{f.share_pct:.1f}%", _f(f.total_us), str(f.kernels)] for f in fams]))
        if fams:
            lead = fams[0]
            blocks.append(Para(f"**{literal(lead.family)}** leads this stage with {lead.share_pct:.1f}% of kernel "
                               f"time; the top {len(rows)} kernels cover {sum(k.share_pct for k in rows):.1f}%."))
    return blocks


def _sol_blocks(inputs: ReportInputs) -> list[Block]:
    blocks: list[Block] = [Heading(2, "Speed of light per D4 row")]
    if inputs.sol_rows is None or inputs.deployment is None or inputs.hardware is None:
        blocks.append(Para("Not computed: needs D4 rows and the deployment: --hardware, --batch-per-rank, --kv-len "
                           "(and --tp/--dp/--ep, --mtp-draft-tokens as deployed), or an analysis that saved them "
                           "(a scenario run with SOL, `analyze --hardware ...`). The SOL model covers DeepSeek-V3 shapes "
                           "(analysis/data/models/deepseek-v3*.yaml)."))
        return blocks
    d, hw = inputs.deployment, inputs.hardware
    blocks.append(Para(
        f"Hardware {literal(hw.name)}; batch {d.batch_per_rank} per rank, KV length {d.kv_len}, tp {d.tp}, "
        f"dp {d.dp}, ep {d.ep}, MTP draft tokens {d.mtp_draft_tokens}, weights {literal(d.weight_dtype)}, "
        f"KV {literal(d.kv_dtype)}, MLA {literal(d.mla_form)}. "
        "SOL = max(FLOPs / compute peak, HBM bytes / HBM bandwidth, network bytes / link bandwidth); "
        "% of SOL = 100 x SOL / measured (100% = at the hardware limit). Formulas: docs/sol.md."))
    rows = [[r.group, r.module, r.kernel, _f(r.value_us, 2), r.term or "", _f(r.sol_us, 2),
             "" if r.sol_pct is None else f"{r.sol_pct:.0f}%", r.bound or ""] for r in inputs.sol_rows]
    rows = with_shown_names(rows, 2)  # whole kernel names are the analysis's; a table shows them short
    blocks.append(Table(["Group", "Module", "Kernel", "Measured us", "SOL term", "SOL us", "% of SOL", "Bound"], rows))
    if inputs.step_sol is not None:
        measured = f"; measured step {inputs.step_ms:.2f} ms" if inputs.step_ms else ""
        blocks.append(Para(f"Whole-step SOL (every layer, no overlap credited): {inputs.step_sol.step_us / 1000:.2f} ms{measured}."))
    peaks = [[key, f"{p.value:.4g}", "measured" if p.measured else "datasheet", p.source] for key, p in hw.peaks.items()]
    blocks.append(Table(["Peak", "Value", "Kind", "Source"], peaks))
    return blocks


def _what_if_table(what_ifs: list[WhatIf]) -> Table:
    return Table(
        ["Group", "Module", "Kernel", "Layers", "Row us", "New row us", "Step ms", "New step ms", "Saving ms", "Step speedup"],
        with_shown_names([[w.group, w.module, w.kernel, f"{w.layers:g}", _f(w.row_us, 2), _f(w.new_row_us, 2),
                           _f(w.step_ms, 2), _f(w.new_step_ms, 2), _f(w.saving_ms, 3), f"{w.step_speedup:.3f}x"]
                          for w in what_ifs], 2))


def _what_if_blocks(inputs: ReportInputs) -> list[Block]:
    blocks: list[Block] = [Heading(2, "What-if: where optimisation pays")]
    if not inputs.what_ifs and not inputs.speedup_what_ifs:
        blocks.append(Para("Not computed: needs D4 rows and the measured step time (an analysis directory, or traces "
                           "that could be analysed into steps)."))
        return blocks
    blocks.append(Para("Amdahl: the step if one D4 row alone changed, largest saving first; a row repeats over its "
                       "layers. A row hidden under another stream saves less than shown."))
    if inputs.what_ifs:
        blocks.append(Heading(3, "Each row at its speed of light"))
        blocks.append(_what_if_table(inputs.what_ifs))
    if inputs.speedup_what_ifs:
        blocks.append(Heading(3, f"Each row {inputs.speedup:g}x faster"))
        blocks.append(_what_if_table(inputs.speedup_what_ifs))
    return blocks


def _ncu_blocks(inputs: ReportInputs) -> list[Block]:
    from analysis.report.plots import histogram_png, roofline_png

    blocks: list[Block] = [Heading(2, "Nsight Compute: classification, histograms, roofline")]
    kernels, hw = inputs.ncu, inputs.hardware
    if not kernels or hw is None:
        blocks.append(Para("Not computed: pass --ncu EXPORT.csv (from `moe-harness ncu`) and --hardware."))
        return blocks
    counts = class_counts(kernels)
    n = len(kernels)
    blocks.append(Para(f"{n} profiled launches. Rule (from the seed report): memory bound when arithmetic intensity "
                       f"is below the ridge point ({ridge_point(hw, inputs.ncu_dtype):.0f} FLOP/B for "
                       f"{literal(inputs.ncu_dtype)} on {literal(hw.name)}) and memory throughput is clearly above SM "
                       "throughput; compute bound for the mirror image; balanced otherwise. Without FLOP counts, "
                       "throughputs alone decide."))
    if all(k.tensor_flops_counted for k in kernels):
        blocks.append(Para("FLOPs = tensor-core operations (the export's `sm__ops_path_tensor_src_*` counters, one "
                           "FLOP each) + FMA/ADD/MUL pipe instructions (an FMA counts 2); bytes = DRAM read + write."))
    else:
        blocks.append(Para("**Intensity is a lower bound:** this export has no tensor-core operation counters, so FLOPs "
                           "count only FMA/ADD/MUL pipe instructions, not tensor-core (HMMA/HGMMA) work. GEMM and "
                           "attention kernels therefore show too low an arithmetic intensity and sit too far left on "
                           "the roofline; their SM throughput is the better signal (docs/kernel-report.md)."))
    blocks.append(Table(["Class", "Count", "% of profiled"],
                        [[c, str(counts.get(c, 0)), f"{100 * counts.get(c, 0) / n:.1f}%"] for c in (*CLASSES, UNKNOWN)]))
    means = class_means(kernels)
    labels = [("sm_throughput_pct", "SM throughput %"), ("dram_throughput_pct", "DRAM throughput %"),
              ("mem_throughput_pct", "Memory throughput %"), ("achieved_occupancy_pct", "Achieved occupancy %"),
              ("l1tex_hit_rate_pct", "L1 hit rate %"), ("l2_hit_rate_pct", "L2 hit rate %"), ("duration_us", "Mean duration us")]
    cols = [*CLASSES, "overall"]
    blocks.append(Table(["Metric (unweighted mean)", *cols], [[label, *[_f(means[c][q], 2) for c in cols]] for q, label in labels]))
    longest = sorted(kernels, key=lambda k: -k.values.get("duration_us", 0.0))[:10]
    from analysis.ingest.kernel_names import kernel_family, readable_name

    blocks.append(Heading(3, "Longest profiled launches"))
    flop_label = "FLOP/B" if all(k.tensor_flops_counted for k in kernels) else "FLOP/B (no tensor cores)"
    blocks.append(Table(["Duration us", "Class", "SM %", "Memory %", flop_label, "Library", "Kernel"],
                        [[_f(k.values.get("duration_us"), 2), k.classification, _f(k.values.get("sm_throughput_pct")),
                          _f(k.values.get("mem_throughput_pct")), _f(k.intensity, 2), kernel_family(k.name),
                          readable_name(k.name)] for k in longest]))
    blocks.append(Heading(3, "Histograms"))
    for quantity, title, unit in HISTOGRAMS:
        values = [k.values[quantity] for k in kernels if quantity in k.values]
        if quantity == "dram_bytes_per_s":
            values = [v / 1e9 for v in values]
        if values:
            blocks.append(Image(f"hist_{quantity}.png", f"{title} ({unit})", histogram_png(values, title, unit)))
    blocks.append(Heading(3, "Roofline"))
    if any(k.intensity and k.flops_per_s for k in kernels):
        blocks.append(Image("roofline_normalised.png", "Roofline, normalised to the ridge point and compute peak",
                            roofline_png(kernels, hw, inputs.ncu_dtype, normalised=True)))
        blocks.append(Image("roofline_physical.png", "Roofline, physical units",
                            roofline_png(kernels, hw, inputs.ncu_dtype, normalised=False)))
    else:
        blocks.append(Para("No FLOP counts in the export: collect the roofline metrics (see docs/kernel-report.md)."))
    return blocks


def _mb(value: float | None) -> str:
    return "" if value is None else f"{value / 1e6:,.1f}"


def _sol_vs_ncu_blocks(inputs: ReportInputs) -> list[Block]:
    blocks: list[Block] = [Heading(2, "Speed of light: the model next to Nsight Compute")]
    checks = inputs.sol_checks
    if not checks:
        blocks.append(Para("Not computed: needs SOL rows (see above), the traced kernel rows of the same run, and an "
                           "ncu export (--ncu) of the same workload."))
        return blocks
    blocks.append(Para(
        "Per D4 row with a SOL term. **Model % of SOL** = 100 x the model's SOL / the row's traced time. **ncu SOL %** "
        "is what Nsight Compute measured for the row's own kernels: max(SM, memory) throughput as % of peak, "
        "weighted by each kernel's traced time; **ncu DRAM %** likewise. **Model MB** is the model's HBM traffic "
        "per layer; **ncu MB** is the DRAM bytes ncu measured per launch times launches per layer, for the profiled "
        "kernels only (**profiled %** of the row's traced time; compare bytes only near 100%). A row far below "
        "its model % while its kernels run near their ncu limit spends its time outside those kernels' peak "
        "work: extra kernels, launch gaps or more bytes than the model counts. A kernel name shared by several "
        "modules gets the mean of all its profiled launches."))
    rows = [[c.group, c.module, c.kernel, c.bound, _f(c.measured_us, 1), _f(c.sol_us, 1),
             "" if c.model_sol_pct is None else f"{c.model_sol_pct:.0f}%", f"{c.profiled_pct:.0f}%",
             "" if c.ncu_sol_pct is None else f"{c.ncu_sol_pct:.0f}%",
             "" if c.ncu_dram_pct is None else f"{c.ncu_dram_pct:.0f}%",
             _mb(c.model_hbm_bytes), _mb(c.ncu_dram_bytes_per_layer)] for c in checks]
    blocks.append(Table(
        ["Group", "Module", "Kernel", "Bound", "Measured us", "SOL us", "Model % of SOL", "Profiled %",
         "ncu SOL %", "ncu DRAM %", "Model MB", "ncu MB"], with_shown_names(rows, 2)))
    from analysis.ingest.kernel_names import readable_name

    kernel_rows = []
    for c in checks:
        for k in c.kernels:
            if k.ncu_launches:
                kernel_rows.append([f"{c.group}/{c.module}", readable_name(k.name), f"{k.launches_per_layer:.2g}",
                                    _f(k.traced_us_per_layer, 1), _f(k.ncu_mean_us, 1), _f(k.sm_pct, 0),
                                    _f(k.mem_pct, 0), _f(k.dram_pct, 0), _mb(k.dram_bytes)])
    if kernel_rows:
        blocks.append(Heading(3, "Profiled kernels per row"))
        blocks.append(Table(["Row", "Kernel", "Launches/layer", "Traced us/layer", "ncu us/launch", "SM %",
                             "Memory %", "DRAM %", "DRAM MB/launch"], kernel_rows))
    return blocks


def _appendix_blocks(top: TopKernelsResult) -> list[Block]:
    blocks: list[Block] = [Heading(2, "Appendix: readable names and full signatures")]
    seen: set[str] = set()
    rows = []
    for stage, kernels in top.top.items():
        for k in kernels:
            if k.name in seen:
                continue
            seen.add(k.name)
            rows.append([k.readable, k.family, stage, Code(k.name)])
    blocks.append(Table(["Readable name", "Library", "Stage", "Full signature"], rows))
    return blocks


def build_report(inputs: ReportInputs) -> list[Block]:
    blocks: list[Block] = [Heading(1, literal(inputs.title)), Heading(2, "Overview")]
    blocks.append(Para("Sources: " + ", ".join(code(s) for s in inputs.sources)))
    for note in inputs.notes:  # they name files and kernels: as written
        blocks.append(Para(literal(note)))
    blocks += _top_blocks(inputs.top)
    blocks += _sol_blocks(inputs)
    blocks += _what_if_blocks(inputs)
    blocks += _ncu_blocks(inputs)
    blocks += _sol_vs_ncu_blocks(inputs)
    blocks += _appendix_blocks(inputs.top)
    return blocks


def write_report(blocks: list[Block], out_dir: str | Path, title: str) -> dict[str, Path]:
    """kernel_report.md (+ kernel_report_files/*.png) and a self-contained kernel_report.html."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    image_dir = out / f"{REPORT_STEM}_files"
    images = [b for b in blocks if isinstance(b, Image)]
    if images:
        image_dir.mkdir(exist_ok=True)
        for image in images:
            write_atomically(image_dir / image.name, image.png)
    files = {"md": out / f"{REPORT_STEM}.md", "html": out / f"{REPORT_STEM}.html"}
    write_atomically(files["md"], to_markdown(blocks, image_dir.name).encode())
    write_atomically(files["html"], to_html(blocks, title).encode())
    return files
