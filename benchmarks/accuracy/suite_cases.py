"""The accuracy suite's cases: every eager trace with nn.Module ranges the project can judge against.

Three sources: the corpus recorded for the suite (tests/data/accuracy/suite.yaml; CUDA-graph
replays there name their eager twin as truth), the embedded engine's own bundled traces
(tests/data), and the public eager traces beside the checkout (../shared/traces/real).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
CORPUS = ROOT / "tests" / "data" / "accuracy"


@dataclass(frozen=True)
class Case:
    name: str
    path: Path
    truth: Path | None  # None: the trace's own ranges
    steps: int
    layers: int
    moe_layers: int
    model: str
    hardware: str
    origin: str  # corpus | bundled | public
    meta: Path | None = None  # corpus: the recording's meta file (module attribute names, counts)
    varied_layers: tuple[tuple[int, int], ...] | None = None  # per step (layers, MoE layers), where steps differ

    @property
    def step_layers(self) -> list[int]:
        return [n for n, _ in self.varied_layers] if self.varied_layers else [self.layers] * self.steps

    @property
    def step_moe_layers(self) -> list[int]:
        return [m for _, m in self.varied_layers] if self.varied_layers else [self.moe_layers] * self.steps


def case_name(entry: dict) -> str:
    """A suite.yaml entry's name: its file's model part, and the rank of a multi-GPU recording."""
    return Path(entry["file"]).name.split("-TP-")[0] + ("" if entry.get("world_size", 1) == 1 else f"-r{entry['rank']}")


def corpus_cases() -> list[Case]:
    suite = yaml.safe_load((CORPUS / "suite.yaml").read_text())["traces"]
    by_file = {e["file"]: e for e in suite}
    cases = []
    for e in suite:
        truth = e.get("ground_truth")
        truth_path = CORPUS / by_file[truth]["file"] if truth else None
        cases.append(Case(case_name(e), CORPUS / e["file"], truth_path, e["steps"], e["layers"]["total"],
                          e["layers"]["moe"], e["family"], e["recorded"]["hardware"], "corpus", CORPUS / e["meta"]))
    return cases


BUNDLED = [
    # the embedded engine's demo traces (tests/data/README.md)
    ("embedded-cpu-demo", "embedded-cpu-demo-TP-0-DECODE.trace.json.gz", 3, 4, 3, "deepseek_v3", "CPU"),
    ("embedded-h100-demo_gpu", "embedded-h100-demo_gpu-TP-0-DECODE.trace.json.gz", 5, 4, 3, "deepseek_v3", "H100"),
    ("embedded-h200-demo_gpu", "embedded-h200-demo_gpu-TP-0-DECODE.trace.json.gz", 5, 4, 3, "deepseek_v3", "H200"),
    # real SGLang 0.5.17 eager decode with stacks (tests/data/README.md, docs/gpu-runs.md): DeepSeek-V3
    # widths, 1 dense + 3 MoE layers, FP8; experts through DeepGEMM, and through Triton's fused_moe
    ("sglang-0.5.17-eager-deepgemm-moe",
     "sglang-real/eager/sglang-0.5.17-dsv3-4l-fp8-h200-eager-deepgemm-moe-TP-0-decode.trace.json.gz",
     4, 4, 3, "deepseek_v3", "H200"),
    ("sglang-0.5.17-eager-fused-moe",
     "sglang-real/eager/sglang-0.5.17-dsv3-4l-fp8-h200-eager-fused-moe-TP-0-decode.trace.json.gz",
     4, 4, 3, "deepseek_v3", "H200"),
]
# real SGLang 0.5.17 eager decode with MTP (EAGLE, the model's own NextN layer): each target verify
# forward (4 layers) and each NextN draft-extend forward (1 MoE layer) is a step of its own
MTP = Case("sglang-0.5.17-eager-mtp",
           ROOT / "tests" / "data" / "sglang-real" / "eager" / "sglang-0.5.17-dsv3-4l-fp8-h200-eager-mtp-TP-0-decode.trace.json.gz",
           None, 8, 4, 3, "deepseek_v3", "H200", "bundled", varied_layers=((4, 3), (1, 1)) * 4)

# Real SGLang 0.5.17 expert-parallel decodes recorded on four H100s (tests/data/sglang-real/ep/README.md):
# DeepSeek-V3 widths, 1 dense + 3 MoE layers, FP8, batch 16, 6 profiled steps. Eager traces (with stacks)
# are their own truth; a CUDA-graph trace's truth is the eager recording of the same deployment, rank by
# rank. (config, ranks, truth config or None); the two-node job's graph traces are judged against the
# TP4 EP4 eager recording.
EP_DIR = ROOT / "tests" / "data" / "sglang-real" / "ep"
EP_RUN = ROOT / "tests" / "data" / "sglang-real" / "ray-run" / "sglang_dsv3_4l_2x2_deepep-20261126-124934" / "traces"
EP_PREFIX = "sglang-0.5.17-dsv3-4l-fp8-"
EP_REAL = [
    ("h100x2-deepep-ll-eager", 2, None),
    ("h100x2-deepep-ll-graph", 2, "h100x2-deepep-ll-eager"),
    ("h100x2-ep-noa2a-eager", 2, None),
    ("h100x2-ep-noa2a-graph", 2, "h100x2-ep-noa2a-eager"),
    ("h100x4-deepep-ll-eager", 4, None),
    ("two-node-job-graph", 4, "h100x4-deepep-ll-eager"),
]


def _ep_file(config: str, rank: int) -> Path:
    if config == "two-node-job-graph":
        return next(EP_RUN.glob(f"*-TP-{rank}-EP-{rank}-DECODE.trace.json.gz"))
    return EP_DIR / f"{EP_PREFIX}{config}-TP-{rank}-EP-{rank}-decode.trace.json.gz"


def ep_cases() -> list[Case]:
    return [Case(f"sglang-0.5.17-{config}-r{rank}", _ep_file(config, rank),
                 _ep_file(truth, rank) if truth else None, 6, 4, 3, "deepseek_v3",
                 f"{ranks} x H100", "bundled")
            for config, ranks, truth in EP_REAL for rank in range(ranks)]


# Real SGLang 0.5.17 MTP (EAGLE, the NextN layer) decodes with DeepEP low-latency on two H200s, eager
# (tests/data/sglang-real/mtp/README.md): one recorded with stacks (its own truth), one without (judged
# against the first, a separate run of the same deployment: names aligned by kernel name, on its own
# durations). 5 verify iterations: each a target verify (4 layers) and a draft extend (1 MoE layer).
MTP_DIR = ROOT / "tests" / "data" / "sglang-real" / "mtp"
MTP_REAL = [("h200x2-deepep-mtp-eager", None), ("h200x2-deepep-mtp-eager-nostack", "h200x2-deepep-mtp-eager")]


def mtp_ep_cases() -> list[Case]:
    def path(config: str, rank: int) -> Path:
        return MTP_DIR / f"{EP_PREFIX}{config}-TP-{rank}-EP-{rank}-decode.trace.json.gz"

    return [Case(f"sglang-0.5.17-{config}-r{rank}", path(config, rank), path(truth, rank) if truth else None,
                 10, 4, 3, "deepseek_v3", "2 x H200", "bundled", varied_layers=((4, 3), (1, 1)) * 5)
            for config, truth in MTP_REAL for rank in (0, 1)]


PUBLIC = [
    # relative to shared/traces/real (see its SOURCES.md); eager, with nn.Module ranges
    ("vllm-gpt-oss-120b-b200-eager", "nvidia/vllm_gpt-oss-120b_b200_eager/eager_trace.json.gz", 1, 36, 36, "gpt_oss", "B200"),
    ("sglang-qwen3-8b-mi300x-extend", "amd/sglang_qwen3-8b_mi300x_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz",
     1, 36, 0, "qwen3", "MI300X"),
]


def bundled_cases() -> list[Case]:
    return [Case(name, ROOT / "tests" / "data" / f, None, steps, layers, moe, model, hw, "bundled")
            for name, f, steps, layers, moe, model, hw in BUNDLED] + [MTP]


def public_cases(real_dir: Path) -> list[Case]:
    return [Case(name, real_dir / rel, None, steps, layers, moe, model, hw, "public")
            for name, rel, steps, layers, moe, model, hw in PUBLIC]
