"""Two-batch overlap of a prefill (extend) step, read from the order its kernels were launched in.

Why: under SGLang's two-batch overlap a prefill step with DeepEP in normal mode cuts every MoE layer
at two yields into three stages (sglang 0.5.x operations_strategy.py, the DeepSeek prefill strategy,
no stage delay): [input norm, attention, o_proj, gate, top-k, the dispatch's quantisation]
[dispatch, routed experts, their gather] [shared experts, combine, output], and runs micro-batch
B's stage right after A's: A0 B0 A1 B1 A2+A0' B2+B0' ... Cut at attention cores, the 4-layer model of
tests/data/sglang-real/pd-ray read as 7 layers. On the GPU the two micro-batches' stages overlap
(DeepEP runs on a stream of its own), but the CPU launches each stage whole, one after the other: in
launch order (an eager step's correlation ids) every stage is one block, and B's block of a stage
repeats A's kernels. So the blocks are found from the anchors (attention cores, DeepEP's dispatch and
combine groups) and that repetition, and put in the order each micro-batch alone runs them, as the
decode reader (two_batch.py) does; two_batch_cut names them.

What is relied on: correlation ids in launch order, one per kernel (an eager step: a CUDA-graph
replay launches once and is not read here); in launch order the anchors run C* CC DD (KCKC DD)* KK
(the dense layers' cores, then per MoE layer A's and B's cores, dispatches and combines, the next
layer's cores launched after each combine); each micro-batch's attention block opens with its input
norm, and its experts' and shared experts' blocks hold the same kernel classes in the same order as
the other's. A step that does not is left to the one-batch reading, whose note says so.
"""
from __future__ import annotations

import re

from analysis.attribution.two_batch import TwoBatchOrder, is_two_phase
from analysis.ingest.kernel_classes import class_of_name
from analysis.ingest.trace_model import Kernel

_ANCHORS = re.compile(r"(C*)CCDD((?:KCKCDD)*)KK")


def prefill_two_batch_order(kernels: list[Kernel]) -> TwoBatchOrder | None:
    """The micro-batch order of a two-batch-overlapped prefill step (DeepEP normal mode), or None."""
    if len(kernels) < 16 or any(is_two_phase(k.name) for k in kernels):
        return None  # DeepEP low latency (found at its first MoE layer): the decode reader's
    correlations = [k.correlation for k in kernels]
    if min(correlations) < 0 or len(set(correlations)) != len(kernels):
        return None
    launch = sorted(range(len(kernels)), key=correlations.__getitem__)
    classes = [class_of_name(kernels[i].root or kernels[i].name) for i in launch]
    tokens, at = [], []
    for p, cls in enumerate(classes):
        if cls == "attn_core":
            tokens.append("C")
        elif cls in ("dispatch", "combine") and (p == 0 or classes[p - 1] != cls):
            tokens.append("D" if cls == "dispatch" else "K")
        else:
            continue
        at.append(p)
    match = _ANCHORS.fullmatch("".join(tokens))
    if match is None:
        return None
    dense, layers = len(match.group(1)), 1 + len(match.group(2)) // 6
    cores = [p for p, t in zip(at, tokens) if t == "C"]
    dispatches = [p for p, t in zip(at, tokens) if t == "D"]
    combines = [p for p, t in zip(at, tokens) if t == "K"]
    blocks = _blocks(classes, cores, dispatches, combines, dense, layers)
    if blocks is None:
        return None
    head, micro_layers, shared, moe_start = blocks
    order = [*head, *(p for block in micro_layers for p in block)]
    order += range(max(order) + 1, len(launch))  # the tail: the final norm, the head, sampling
    if sorted(order) != list(range(len(launch))):
        return None
    # The line the cut reads: every kernel of the attention's stream, and DeepEP's. Its kernels run on
    # a stream of their own, where a rank waiting for the others keeps them running for milliseconds
    # beside the other micro-batch's stages (and the timing's line across streams follows them there):
    # laid on the line among the kernels they were launched with, as the low-latency ones are launched
    # on the compute stream, the cut reads what each micro-batch ran, whatever a rank waited
    compute = {kernels[launch[p]].stream for p in cores}
    main = frozenset(launch[p] for p, cls in enumerate(classes)
                     if kernels[launch[p]].stream in compute or cls in ("dispatch", "combine"))
    return TwoBatchOrder([launch[p] for p in order], 2 * layers, launch[dispatches[0]], launch[moe_start],
                         frozenset(launch[p] for p in shared), main)


def _blocks(classes: list[str], cores: list[int], dispatches: list[int], combines: list[int], dense: int,
            layers: int) -> tuple[range, list[list[int]], list[int], int] | None:
    """Launch positions: the head (the dense layers), each micro-layer in one micro-batch's order (A, B,
    A, B, ...), the shared experts' kernels, and where the first MoE micro-layer begins. None where
    a stage's blocks cannot be told apart.

    The attention stage's two blocks may differ (SGLang picks the MLA form per micro-batch: one may
    run the absorbed form while the other expands the cache), so each is found by what opens it, its
    input norm; the experts' and the shared experts' stages repeat the same kernels in both."""
    def same(a: range, b: range) -> bool:
        return len(a) == len(b) and len(a) > 0 and classes[a.start:a.stop] == classes[b.start:b.stop]

    norms = [p for p, c in enumerate(classes) if c == "norm"]
    # A's first MoE layer opens with its input norm: the second norm after the last dense layer's
    # attention core (the first is that layer's post-attention norm), else the step's first norm
    after_dense = [p for p in norms if p > cores[dense - 1]] if dense else norms
    moe_start = after_dense[1 if dense else 0] if len(after_dense) > (1 if dense else 0) else None
    # B's opens with its input norm, the first norm after A's routing (its top-k, after its core)
    routing = next((p for p in range(cores[dense], cores[dense + 1]) if classes[p] == "topk"), None)
    b_start = next((p for p in norms if routing is not None and p > routing), None)
    if moe_start is None or b_start is None or not moe_start < cores[dense] < b_start < cores[dense + 1]:
        return None
    opening = [list(range(moe_start, b_start)), list(range(b_start, dispatches[0]))]  # A's, B's
    micro_layers: list[list[int]] = []
    shared: list[int] = []
    for j in range(layers):
        d_a, d_b = dispatches[2 * j], dispatches[2 * j + 1]
        experts = [range(d_a, d_b), range(d_b, 2 * d_b - d_a)]
        if not same(*experts):
            return None
        k_a, k_b = combines[2 * j], combines[2 * j + 1]
        a_start = experts[1].stop
        b_start = a_start + (k_b - k_a)  # B's shared experts are as many kernels before its combine
        last = j == layers - 1
        end = b_start + (b_start - a_start) if last else dispatches[2 * j + 2]
        tails = [range(a_start, b_start), range(b_start, end)]  # shared experts, combine, the next attention
        if not a_start <= k_a < b_start < end:
            return None
        # this layer's part ends with the combine; the rest opens the micro-batch's next layer
        cut = len(tails[0]) if last else max(p for p in tails[0] if classes[p] == "combine") + 1 - a_start
        if not same(tails[0][:cut], tails[1][:cut]):
            return None
        for mb in (0, 1):
            micro_layers.append([*opening[mb], *experts[mb], *tails[mb][:cut]])
            shared += tails[mb][:k_a - a_start]  # before its combine: the shared experts
        opening = [list(tails[0][cut:]), list(tails[1][cut:])]
    return range(0, moe_start), micro_layers, shared, moe_start
