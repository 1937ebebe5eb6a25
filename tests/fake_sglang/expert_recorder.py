"""The fake's expert-distribution recorder, following SGLang's srt/eplb/expert_distribution.py
(the same in 0.5.13.post1, 0.5.17 and 0.5.23) in its `stat` modes:

- without --expert-distribution-recorder-mode the recorder is the no-op one, whose start / stop /
  dump raise in the scheduler ("Please set ServerArgs.expert_distribution_recorder_mode to use
  ExpertDistributionRecorder."): the server dies;
- start clears the record and starts recording (a warning when already recording), stop stops it
  (a warning when not recording); every forward pass while recording adds one row of per-layer,
  per-logical-expert (token, expert) counts to a buffer: circular, of
  --expert-distribution-recorder-buffer-size rows (default 1000 once a mode is set), or unbounded
  with -1;
- dump writes, on rank 0 only, torch.save({"rank": 0, "logical_count": int32 [rows, layers,
  experts], "average_utilization_rate_over_window": None}) as
  $SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR/expert_distribution_recorder_{time.time()}.pt (default
  /tmp), then clears the record.

Routing is made up: each MoE layer has its own seeded skew over the experts, so the busiest expert
stands out from the mean as in real traffic. Shapes follow the fake's model (the recorded trace's:
4 layers, the first dense, 256 routed experts, top-8).
"""
from __future__ import annotations

import os
import random
import time
from pathlib import Path

NUM_LAYERS = 4
DENSE_LAYERS = 1
NUM_EXPERTS = 256
TOP_K = 8
NOT_SET = ("Please set ServerArgs.expert_distribution_recorder_mode to use ExpertDistributionRecorder.")


class ExpertRecorder:
    def __init__(self, mode: str | None, buffer_size: int | None, node_rank: int, seed: int = 11):
        self.mode = mode
        self.buffer_size = buffer_size if buffer_size is not None else (1000 if mode else None)
        self.node_rank = node_rank
        self.recording = False
        self.rows: dict[int, list[list[int]]] = {}  # buffer row -> counts; rows never written stay zero
        self.passes = 0
        rng = random.Random(seed)
        self.weights = []
        for _layer in range(NUM_LAYERS):
            w = [1.0 / (e + 1) ** 0.6 for e in range(NUM_EXPERTS)]
            rng.shuffle(w)
            self.weights.append(w)
        self.rng = random.Random(seed + 1)

    def _check(self) -> None:
        if self.mode is None:
            raise Exception(NOT_SET)  # noqa: TRY002 - SGLang raises a bare Exception
        if self.mode not in ("stat", "stat_approx"):
            raise NotImplementedError(f"fake SGLang records only the stat modes, not {self.mode!r}")

    def _circular(self) -> bool:
        return self.buffer_size is not None and self.buffer_size >= 0

    def _reset(self) -> None:
        self.rows, self.passes = {}, 0

    def start(self) -> None:
        self._check()
        if self.recording:
            print("SGLang server is already recording expert ids.", flush=True)
        self._reset()
        self.recording = True

    def stop(self) -> None:
        self._check()
        if not self.recording:
            print("SGLang server has not been recording expert ids.", flush=True)
        self.recording = False

    def forward_pass(self, tokens: int) -> None:
        """One forward pass of `tokens` tokens, each routed to TOP_K distinct experts per MoE layer."""
        if not self.recording:
            return
        row = [[0] * NUM_EXPERTS for _ in range(NUM_LAYERS)]
        for layer in range(DENSE_LAYERS, NUM_LAYERS):
            for _ in range(tokens):
                chosen: set[int] = set()
                while len(chosen) < TOP_K:
                    chosen.update(self.rng.choices(range(NUM_EXPERTS), weights=self.weights[layer], k=TOP_K - len(chosen)))
                for e in chosen:
                    row[layer][e] += 1
        self.rows[self.passes % self.buffer_size if self._circular() else self.passes] = row
        self.passes += 1

    def dump(self) -> Path | None:
        self._check()
        path = None
        if self.node_rank == 0:  # rank 0 writes the all-reduced counts
            import torch  # the fake runs where the tests run: the pinned CPU torch

            folder = Path(os.environ.get("SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR", "/tmp"))
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"expert_distribution_recorder_{time.time()}.pt"
            counts = torch.zeros((self.buffer_size if self._circular() else self.passes, NUM_LAYERS, NUM_EXPERTS),
                                 dtype=torch.int32)
            for index, row in self.rows.items():
                counts[index] = torch.tensor(row, dtype=torch.int32)
            torch.save({"rank": 0, "logical_count": counts, "average_utilization_rate_over_window": None}, str(path))
            print(f"Write expert distribution to {path}", flush=True)
        self._reset()
        return path
