"""What a token costs: per accepted token for an MTP column, per step for plain decode, per prompt token
and per chunk for prefill (extend steps), side by side.

Why: an MTP verify iteration (the verify step, the draft steps, the draft extend) yields the accept
length's tokens where a plain decode step yields one, so only per token do the two compare. Each
part is per rank the statistic over its steps' wall time (first kernel start to last kernel end,
every step of the stage whatever layers it was cut into: its time is spent either way), times the
steps of that stage per verify step, then the rank policy; divided by the accept length. Beside the
GPU span, the start-to-start time of consecutive iterations (verify to verify, decode to decode)
per token holds the host's work between the steps too. Under a compare, each MTP column is set
against the first plain decode column (notes). An extend step computes its batch's prompt tokens
(`toks=` of its label) over its chunks (the requests, or their parts under chunked prefill: `bs=`):
per rank the mean of each over the steps, then the rank policy.
"""
from __future__ import annotations

from collections import defaultdict

import msgspec

from analysis.attribution.rows import StepRow
from analysis.tables.d4_cells import _per_rank_stat, _policy
from analysis.tables.load_compare import step_periods_us
from analysis.attribution.stages import DECODE, DRAFT, DRAFT_EXTEND, DRAFT_STAGES, EXTEND, VERIFY

GROUP = "per token (ms)"
PARTS = (("verify", "verify step"), (DRAFT, "draft steps"), (DRAFT_EXTEND, "draft extend"),
         (DECODE, "plain decode step"), (EXTEND, "prefill step"))


class TokenCost(msgspec.Struct, omit_defaults=True):
    """Per iteration (one verify, decode or extend step) in us; tokens it yields or computes; start-to-start time."""

    tokens: float | None  # the accept length (MTP; None when not given), 1 for plain decode, prompt tokens (extend)
    parts_us: dict[str, float]  # verify, draft, draft_extend per iteration; or decode; or extend
    period_us: float | None  # start to start of consecutive iterations
    chunks: float | None = None  # extend: the chunks (requests or their parts) a step computes

    @property
    def span_us(self) -> float:
        return sum(self.parts_us.values())


def token_cost(step_rows: list[StepRow], used: set[tuple[str, int]], stage: str, stat: str, policy: str,
               accept_length: float | None) -> TokenCost | None:
    """The cost of the column's tokens; None for a stage whose tokens are not its own (draft steps)."""
    if stage not in (VERIFY, DECODE, EXTEND):
        return None
    iterations: dict[str, list[float]] = defaultdict(list)
    for s in step_rows:
        if (s.rank, s.step) in used:
            iterations[s.rank].append(s.step_us)
    periods = {r: p for r, p in step_periods_us(step_rows, used).items() if p}
    period = _policy(_per_rank_stat(periods, stat), policy) if periods else None
    main = _policy(_per_rank_stat(iterations, stat), policy)
    if stage == DECODE:
        return TokenCost(1.0, {"decode": main}, period)
    if stage == EXTEND:
        tokens: dict[str, list[float]] = defaultdict(list)
        chunks: dict[str, list[float]] = defaultdict(list)
        for s in step_rows:
            if (s.rank, s.step) in used and s.query_tokens:
                tokens[s.rank].append(s.query_tokens)
                if s.batch_size:
                    chunks[s.rank].append(s.batch_size)
        return TokenCost(_policy(_per_rank_stat(tokens, "mean"), policy) if tokens else None, {EXTEND: main}, period,
                         _policy(_per_rank_stat(chunks, "mean"), policy) if chunks else None)
    parts = {"verify": main}
    for part in DRAFT_STAGES:
        per_rank: dict[str, float] = {}
        for rank, verify_steps in iterations.items():
            own = [s.step_us for s in step_rows if s.rank == rank and s.stage == part]
            if own:  # mean wall time of the stage's steps x how many of them run per verify step
                per_rank[rank] = _per_rank_stat({rank: own}, stat)[rank] * len(own) / len(verify_steps)
        if per_rank:
            parts[part] = _policy(per_rank, policy)
    return TokenCost(accept_length, parts, period)


def table_lines(columns) -> list[tuple[str, str, list[str]]]:
    """(module, kernel, one value per column in ms) for the rows under the table."""
    costs = [c.token_cost for c in columns]
    if not any(cost is not None and cost.tokens for cost in costs):
        return []

    def per_token(cost: TokenCost | None, us: float | None) -> str:
        if cost is None or not cost.tokens or us is None:
            return ""
        ms = us / cost.tokens / 1000
        return f"{ms:.4f}ms" if EXTEND in cost.parts_us else f"{ms:.2f}ms"  # a prompt token: microseconds

    out = []
    for part, label in PARTS:
        if any(cost is not None and part in cost.parts_us for cost in costs):
            kernel = {DECODE: "per token", EXTEND: "per prompt token"}.get(part, "per accepted token")
            out.append((label, kernel, [per_token(cost, cost.parts_us.get(part)) if cost else "" for cost in costs]))
    out.append(("all steps of a token", "GPU span", [per_token(cost, cost.span_us) if cost else "" for cost in costs]))
    out.append(("all steps of a token", "start to start", [per_token(cost, cost.period_us) if cost else ""
                                                           for cost in costs]))
    return out


def notes(columns) -> list[str]:
    """Each prefill column per prompt token and per chunk; each MTP column against the first plain decode
    column, per token."""
    plain = next((c for c in columns if c.token_cost is not None and c.stage == DECODE), None)
    out = []
    for c in columns:
        cost = c.token_cost
        if cost is not None and c.stage == EXTEND:
            out.append(_prefill_note(c.name, cost))
            continue
        if cost is None or c.stage != VERIFY:
            continue
        if not cost.tokens:
            out.append(f"{c.name}: MTP without an accept length (--accept-length, or a run's load): no cost per "
                       "accepted token")
            continue
        if plain is None:
            continue
        base = plain.token_cost
        mtp_ms, base_ms = cost.span_us / cost.tokens / 1000, base.span_us / 1000
        text = (f"{c.name} against {plain.name}, per token: {mtp_ms:.2f} ms per accepted token at accept length "
                f"{cost.tokens:g} (verify {cost.parts_us['verify'] / cost.tokens / 1000:.2f}, drafts "
                f"{cost.parts_us.get(DRAFT, 0.0) / cost.tokens / 1000:.2f}, draft extend "
                f"{cost.parts_us.get(DRAFT_EXTEND, 0.0) / cost.tokens / 1000:.2f}) against {base_ms:.2f} ms per "
                f"plain decode step: {mtp_ms / base_ms:.2f}x (GPU span)")
        if cost.period_us is not None and base.period_us is not None:
            text += (f", {cost.period_us / cost.tokens / base.period_us:.2f}x start to start "
                     f"({cost.period_us / cost.tokens / 1000:.2f} against {base.period_us / 1000:.2f} ms)")
        out.append(text)
    return out


def _prefill_note(name: str, cost: TokenCost) -> str:
    step_us = cost.parts_us[EXTEND]
    if not cost.tokens:
        return f"{name}: prefill steps without a token count in their labels (toks=): no cost per prompt token"
    text = (f"{name}: prefill, {cost.tokens:.0f} prompt tokens a step on average: {step_us / cost.tokens:.2f} us a "
            "prompt token (the end-to-end step)")
    if cost.chunks:
        text += (f"; {cost.chunks:.1f} chunks a step (requests, or their parts under chunked prefill): "
                 f"{step_us / cost.chunks / 1000:.2f} ms a chunk")
    return text
