"""Batched decode of transformers' DeepseekV3ForCausalLM with a KV cache, and a bounded profile.

No Ray here: the Ray actor (actor.py) and the plain GPU entry point (standalone.py) both drive
this class, so the GPU box needs only torch and transformers.
"""
from __future__ import annotations

import gzip
import logging
import os
import shutil
import tempfile
import time
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM, DynamicCache

from harness.engines.embedded.cache_keyword import cache_keyword
from harness.engines.embedded.log_buffer import LogBuffer
from harness.trace_names import trace_file_name

FAULT_EXIT_CODE = 17  # exit status of a deliberate crash (engine.fault_injection.exit_at_step)


class DecodeEngine:
    """One batch of requests: prefill once, then decode step by step; any window can be profiled."""

    def __init__(self, engine: dict[str, Any], model_config: dict[str, Any], workload: dict[str, Any]):
        self.settings = engine
        self.workload = workload
        self.log = LogBuffer("embedded-engine")
        started = time.perf_counter()
        torch.manual_seed(engine.get("seed", 0))
        if engine.get("threads"):
            torch.set_num_threads(int(engine["threads"]))
        self.device = torch.device(engine["device"])
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("engine.device is cuda but torch sees no CUDA device on this node")
        self.dtype = getattr(torch, engine["dtype"])
        config = DeepseekV3Config(
            **model_config,
            num_mtp_layers=0,
            use_cache=True,
            experts_implementation=engine["experts_implementation"],
            attn_implementation=engine["attn_implementation"],
        )
        previous_dtype = torch.get_default_dtype()
        torch.set_default_dtype(self.dtype)
        try:
            with self.device:  # allocate and initialise the random weights on the target device
                self.model = DeepseekV3ForCausalLM(config).eval()
        finally:
            torch.set_default_dtype(previous_dtype)
        self.config = config
        self.cache_keyword = cache_keyword(self.model.forward)  # `cache` or `past_key_values`, by release
        self.params = sum(p.numel() for p in self.model.parameters())
        self.log.info(
            "built DeepseekV3ForCausalLM: %d layers (%d dense), %d routed experts, %.3f B parameters, "
            "%s on %s, experts=%s attention=%s in %.1f s (torch %s, %d threads)",
            config.num_hidden_layers, config.first_k_dense_replace, config.n_routed_experts,
            self.params / 1e9, engine["dtype"], self.device, self.model.config._experts_implementation,
            self.model.config._attn_implementation, time.perf_counter() - started, torch.__version__,
            torch.get_num_threads(),
        )
        self.step = 0  # decode steps done
        self.cache: DynamicCache | None = None
        self.next_tokens: torch.Tensor | None = None
        self.token_times: list[list[float]] = []  # per request: wall time of each generated token
        self.submitted_ts = 0.0

    def describe(self) -> dict[str, Any]:
        return {
            "torch": torch.__version__,
            "device_name": torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu",
            "parameters": self.params,
            "experts_implementation": self.model.config._experts_implementation,
            "attn_implementation": self.model.config._attn_implementation,
            "num_layers": self.config.num_hidden_layers,
            "first_k_dense_replace": self.config.first_k_dense_replace,
        }

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @torch.inference_mode()
    def prefill(self) -> float:
        """Submit the batch: random prompts, one prefill forward; returns its time in ms."""
        bs, input_len = self.workload["batch_size"], self.workload["input_len"]
        generator = torch.Generator().manual_seed(self.settings.get("seed", 0))
        prompts = torch.randint(0, self.config.vocab_size, (bs, input_len), generator=generator).to(self.device)
        self.submitted_ts = time.time()
        started = time.perf_counter()
        self.cache = DynamicCache(config=self.config)
        out = self.model(input_ids=prompts, use_cache=True, **{self.cache_keyword: self.cache})
        self.next_tokens = out.logits[:, -1].argmax(-1, keepdim=True)
        self._sync()
        now = time.time()
        self.token_times = [[now] for _ in range(bs)]
        prefill_ms = (time.perf_counter() - started) * 1e3
        self.log.info("prefill: batch %d x %d tokens in %.1f ms", bs, input_len, prefill_ms)
        return prefill_ms

    @torch.inference_mode()
    def _decode_one(self) -> float:
        fault = self.settings.get("fault_injection") or {}
        if fault.get("exit_at_step") is not None and self.step >= fault["exit_at_step"]:
            self.log.error("fault injection: exiting at decode step %d", self.step)
            self.log.flush_to_stderr()
            os._exit(FAULT_EXIT_CODE)
        bs = self.workload["batch_size"]
        started = time.perf_counter()
        on_gpu = self.device.type == "cuda"
        if on_gpu:  # an NVTX range per decode step, so Nsight tools can select decode kernels
            torch.cuda.nvtx.range_push("decode")
        with record_function(f"step[DECODE bs={bs}]"):
            out = self.model(input_ids=self.next_tokens, use_cache=True, **{self.cache_keyword: self.cache})
            self.next_tokens = out.logits[:, -1].argmax(-1, keepdim=True)
        if on_gpu:
            torch.cuda.nvtx.range_pop()
        self._sync()
        step_ms = (time.perf_counter() - started) * 1e3
        now = time.time()
        for times in self.token_times:
            times.append(now)
        self.step += 1
        return step_ms

    def decode(self, num_steps: int) -> list[float]:
        """Run decode steps; returns each step's time in ms."""
        if self.cache is None:
            raise RuntimeError("decode before prefill")
        remaining = self.workload["output_len"] - 1 - self.step
        if num_steps > remaining:
            raise RuntimeError(f"asked for {num_steps} decode steps but the requests end in {remaining}")
        return [self._decode_one() for _ in range(num_steps)]

    def profile(self, num_steps: int, prefix: str, record_shapes: bool = True, with_stack: bool = True) -> dict[str, Any]:
        """Profile `num_steps` decode steps; returns {"files": {name: gz bytes}, "step_ms": [...]}.

        The trace goes to a private temp folder and is returned as bytes, so the caller gets it
        whether or not it shares a file system with this process.
        """
        activities = [ProfilerActivity.CPU]
        under_ncu = os.environ.get("MOE_HARNESS_UNDER_NCU") == "1"  # Nsight Compute holds CUPTI: one user only
        if self.device.type == "cuda" and not under_ncu:
            activities.append(ProfilerActivity.CUDA)
        fault = self.settings.get("fault_injection") or {}
        workdir = tempfile.mkdtemp(prefix="moe-harness-profile-")
        try:
            with profile(
                activities=activities, record_shapes=record_shapes, with_stack=with_stack, with_modules=True
            ) as prof:
                step_ms = self.decode(num_steps)
            files: dict[str, bytes] = {}
            if fault.get("drop_trace"):
                self.log.error("fault injection: trace export skipped")
            else:
                raw = os.path.join(workdir, "trace.json")
                prof.export_chrome_trace(raw)
                name = trace_file_name(prefix, "DECODE", 0)
                with open(raw, "rb") as src, gzip.open(os.path.join(workdir, name), "wb", compresslevel=6) as dst:
                    shutil.copyfileobj(src, dst)
                with open(os.path.join(workdir, name), "rb") as fh:
                    files[name] = fh.read()
                self.log.info("profiled %d decode steps -> %s (%d bytes gz)", num_steps, name, len(files[name]))
            return {"files": files, "step_ms": step_ms}
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def finish(self) -> list[float]:
        """Decode the remaining tokens so every request completes; returns their step times."""
        remaining = self.workload["output_len"] - 1 - self.step
        step_ms = self.decode(remaining) if remaining > 0 else []
        self.log.info("all %d requests finished after %d decode steps", len(self.token_times), self.step)
        return step_ms

    def request_records(self) -> list[dict[str, Any]]:
        """Per-request latency records (times in ms; the batch is submitted at once)."""
        records = []
        for index, times in enumerate(self.token_times):
            itl_ms = [(b - a) * 1e3 for a, b in zip(times, times[1:])]
            e2e_ms = (times[-1] - self.submitted_ts) * 1e3
            records.append(
                {
                    "request_id": index,
                    "input_len": self.workload["input_len"],
                    "output_len": len(times),
                    "submitted_ts": self.submitted_ts,
                    "finished_ts": times[-1],
                    "ttft_ms": (times[0] - self.submitted_ts) * 1e3,
                    "tpot_ms": sum(itl_ms) / len(itl_ms) if itl_ms else None,
                    "itl_ms": itl_ms,
                    "e2e_latency_ms": e2e_ms,
                    "completed": len(times) == self.workload["output_len"],
                }
            )
        return records


__all__ = ["DecodeEngine", "FAULT_EXIT_CODE"]
logging.getLogger("transformers").setLevel(logging.ERROR)
