"""Structural attribution: name each kernel by its role in a decoder layer, on any stack.

Why: a signature names the kernels of one stack; on a stack it has never seen (another attention
library, experts as a CUTLASS grouped GEMM or a cuBLAS GEMM) kernel names alone cannot tell a
router GEMM from an expert GEMM. Position can. Every decoder layer runs one attention core, which
cuts a step into layers, dense and MoE layers alike, sliding and full attention alike. The part of
a layer before its attention core is the same kernel sequence in every layer, so the longest
common tail of the stretches before each core says where layers begin. Inside a layer: kernels
before the first GEMM are the input norm, GEMMs before the core are the q/kv projections (norms
between them tell MLA from GQA), GEMMs after it are o_proj, then the post-attention norm; a GEMM
that top-k follows is the router; GEMMs between top-k / dispatch and combine are experts; an
MLP-shaped GEMM chain beside them, or GEMMs on a side stream, are the shared experts; a layer
without routing is dense. What each kernel computes comes from kernel_classes.yaml; which D4 row
each role is shown as, from roles.yaml.
"""
from __future__ import annotations

import bisect
import functools
import itertools
import operator
from collections import Counter
from dataclasses import dataclass, field

from analysis.ingest.kernel_classes import (
    ATTENTION_CORE,
    COMMUNICATION,
    EXPERT_PATH,
    GEMM_LIKE,
    MINOR,
    ROUTING,
    class_of_name,
    collective_role,
    class_test,
    kernel_class,
)
from analysis.attribution.chain import ANCHOR_CLASSES, main_chain
from analysis.attribution.layer_vocabulary import (
    ABSORBED_MLA,
    EXPANDED_MLA,
    UNFUSED_MLA,
    attention_form,
    inner_norm_roles,
    projection_roles,
    routed_roles,
)
from analysis.attribution.layers import LayerCut, Slot, main_stream
from analysis.attribution.module_attribution import kernel_label, name_label
from analysis.attribution.roles import row_of
from analysis.attribution.rows import SECTION_LAYER, SECTION_POST, SECTION_PRE, SOURCE_STRUCTURE
from analysis.attribution.named_rules import STRUCTURE_RULES, rule
from analysis.ingest.trace_model import Kernel
from analysis.attribution.step_times import StepTimes

# KernelRow.rule of each positional decision below (structure_rules.yaml says what each decides):
# looked up here, so a name the file lacks fails on import.
_R = {name: rule(STRUCTURE_RULES, name) for name in (
    "core.attention_cluster", "pre.no_projection", "pre.input_norm", "pre.gather_after_input_norm",
    "pre.projections", "pre.projections_absorbed_mla", "pre.projections_unfused_mla",
    "pre.projections_expanded_mla", "pre.projection_norm",
    "pre.rotary_written_out", "pre.by_class", "pre.among_projections", "pre.before_core", "post.o_proj",
    "post.w_vc_absorbed", "post.collective", "post.o_proj_before_reduce", "post.residual_add",
    "post.attention_norm", "dense.no_gemm", "dense.gate_up_proj", "dense.act", "dense.down_proj",
    "dense.residual_add", "dense.collective", "moe.router", "moe.norm_before_router", "moe.shared_before_router",
    "moe.shared_span", "moe.shared_small_before_topk", "moe.expert_input", "moe.topk", "moe.shared_gate",
    "moe.after_experts", "moe.after_routed", "moe.collective", "routed.up_gate", "routed.down", "routed.act",
    "routed.dispatch", "routed.combine", "routed.collective", "routed.other", "layer.collective_buffer_copy",
    "layer.unplaced", "outside.before_layers", "outside.after_layers", "side.during_attention",
    "side.collective", "side.dispatch_combine", "side.routing", "side.shared_experts", "side.after_combine",
    "side.other")}
Named = tuple[str, str]  # (role, KernelRow.rule of the rule that gave it)

# Kinds that end a layer's pre-attention part when walking back from its attention core.
_PROJECTION_RULES = {ABSORBED_MLA: "pre.projections_absorbed_mla", UNFUSED_MLA: "pre.projections_unfused_mla",
                     EXPANDED_MLA: "pre.projections_expanded_mla"}
_NOT_PRE = EXPERT_PATH | ROUTING | {"allreduce"}
_ROUTED_END = frozenset({"expert_gemm", "moe_finalize", "combine", "a2a"})


@dataclass
class _Unit:
    """Consecutive main-stream kernels that act as one: a GEMM with its split-K reduction and the
    activation quantisation before it, or the operators of one top-level CPU call."""

    kind: str
    lo: int  # first position in the main-stream order
    hi: int  # last position, inclusive
    names: tuple[int, ...]  # its kernels' names as the chain's shape numbers them (_chain_shape)


def _main_stream_units(kernels: list[Kernel]) -> tuple[int, list[int], list[_Unit]]:
    """The busiest stream, the positions of the chain's kernels, and those kernels as units.

    With one stream the chain is that stream; with several, the step's main chain across streams
    (chain.py): what runs one after another, and at each fork the branch that carries on, so a
    graph replay whose layers hop streams keeps every layer; the side branches are the side work."""
    main_idx = chain_positions(kernels)
    return main_stream(kernels), main_idx, _units_of(_chain_shape(_chain_key(kernels, main_idx)))


def chain_positions(kernels: list[Kernel], times: StepTimes | None = None) -> list[int]:
    """The positions of the chain's kernels (the part of the cut that reads timing); `times`: the
    kernels' times (step_times.py), read from them where not given."""
    if times is not None and len(times) != len(kernels):
        raise ValueError(f"times of {len(times)} kernels given for {len(kernels)}")
    streams = times.stream_list if times is not None else [k.stream for k in kernels]
    if len(set(streams)) > 1:
        anchors = chain_anchors(kernels)
        if times is not None:
            starts, ends = times.start_us.tolist(), times.end_us.tolist()
            return main_chain(starts, ends, streams, anchors, (times.start_us, times.end_us, times.stream))
        starts = [k.start_us for k in kernels]
        ends = [k.start_us + k.dur_us for k in kernels]
        return main_chain(starts, ends, streams, anchors)
    return list(range(len(kernels)))



def chain_anchors(kernels: list[Kernel]) -> list[bool]:
    """Per kernel, whether it is of the layers' own line (chain.ANCHOR_CLASSES; a CPU operator by its
    outermost call)."""
    is_anchor = class_test(ANCHOR_CLASSES)
    return [is_anchor[k.root or k.name] for k in kernels]


_ChainKey = tuple[tuple[str, ...], "tuple[str, ...] | None", "tuple[int, ...] | None"]


def _chain_key(kernels: list[Kernel], main_idx: list[int]) -> _ChainKey:
    """All that the units (and so the layer plan) of a chain depend on: its kernels' names, CPU
    operators' outermost calls, and which top-level CPU call each CPU operator belongs to (a
    running number, -1 for GPU kernels). Decode steps repeat the same chain, so the plan is
    made once per distinct key (_layer_plan), and its layers found once per shape (_chain_shape)."""
    chain = [kernels[i] for i in main_idx]
    names = tuple([k.name for k in chain])
    root_list = [k.root for k in chain]
    roots = tuple(root_list) if any(root_list) else None
    calls = None
    if "cpu" in {k.launcher for k in chain}:
        numbered, call, previous = [], -1, None
        for k in chain:
            if k.correlation != previous:
                call += 1
                previous = k.correlation
            numbered.append(call if k.launcher == "cpu" else -1)
        calls = tuple(numbered)
    return names, roots, calls


_ChainShape = tuple[tuple[int, ...], tuple[str, ...], frozenset[int], "tuple[int, ...] | None"]


def _chain_shape(key: _ChainKey) -> _ChainShape:
    """All that the layers of a chain are found from (_layout): per kernel its name as a number
    (the chain's first distinct name 0, the next 1, ...: names are only ever compared for equality)
    and its class; which numbers are memsets; the CPU calls. Chains that differ only in names the
    layer search cannot tell apart (a GEMM whose kernel name carries the batch size, as cuBLAS picks
    another tile for another shape) have one shape, so their layers are found once."""
    names, roots, calls = key
    number: dict[str, int] = {}
    ids = tuple([number.setdefault(n, len(number)) for n in names])
    classes = tuple(map(class_of_name, [r or n for r, n in zip(roots, names)] if roots else names))
    memsets = frozenset(i for n, i in number.items() if n.startswith("Memset"))
    return ids, classes, memsets, calls


def _units_of(shape: _ChainShape) -> list[_Unit]:
    """The chain's units: a GEMM with its split-K reduction and the activation quantisation before
    it, or the operators of one top-level CPU call; every other kernel alone."""
    names, classes, memsets, calls = shape
    units: list[_Unit] = []
    pos, n = 0, len(names)
    while pos < n:
        kind = classes[pos]
        end = pos
        if calls is not None and calls[pos] >= 0:
            while end + 1 < n and calls[end + 1] == calls[pos]:
                end += 1
        elif kind in GEMM_LIKE or kind == "gemm_aux":
            kind = "gemm" if kind == "gemm_aux" else kind
            while end + 1 < n and classes[end + 1] == "gemm_aux":
                end += 1
            lo = pos
            while units and units[-1].hi == lo - 1 and units[-1].lo == units[-1].hi and (
                units[-1].kind == "quant" or names[lo - 1] in memsets
            ):
                lo = units.pop().lo
            units.append(_Unit(kind, lo, end, names[lo:end + 1]))
            pos = end + 1
            continue
        units.append(_Unit(kind, pos, end, names[pos:end + 1]))
        pos = end + 1
    return units


def _attention_clusters(units: list[_Unit]) -> list[tuple[int, int]]:
    """Unit ranges (inclusive) of each attention core with the helpers right beside it."""
    clusters: list[tuple[int, int]] = []
    i = 0
    while i < len(units):
        if units[i].kind != "attn_core":
            i += 1
            continue
        lo = i
        floor = clusters[-1][1] + 1 if clusters else 0
        while lo - 1 >= floor and units[lo - 1].kind == "attn_aux":
            lo -= 1
        hi = i
        while hi + 1 < len(units) and units[hi + 1].kind in ATTENTION_CORE:
            hi += 1
        clusters.append((lo, hi))
        i = hi + 1
    return _split_merged_layers(units, clusters) if clusters else _eager_attention_clusters(units)


def _split_merged_layers(units: list[_Unit], clusters: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Clusters holding a multiple of the usual number of attention-core kernels, split into as many layers.

    Why: every layer of a step runs the same attention, so its cluster holds the same number of
    core kernels (one, or two where a prefix and a suffix part run back to back). A cluster with
    twice the usual number is two layers whose cores ended up side by side in the kernel order:
    a trace whose kernel order interleaves neighbouring layers (seen on an MI300X HIP-graph
    replay, where a layer's attention core follows the next layer's QKV projection) would
    otherwise lose a layer silently.
    """
    cores = [[j for j in range(lo, hi + 1) if units[j].kind == "attn_core"] for lo, hi in clusters]
    counts = Counter(len(c) for c in cores)
    usual = max(counts, key=lambda n: (counts[n], -n))
    if len(counts) == 1 or not usual:
        return clusters
    out: list[tuple[int, int]] = []
    for (lo, hi), own in zip(clusters, cores):
        if len(own) <= usual or len(own) % usual:
            out.append((lo, hi))
            continue
        # each piece ends at its last core (aux kernels after the last core stay with the last piece)
        ends = [own[k + usual - 1] for k in range(0, len(own), usual)]
        ends[-1] = hi
        start = lo
        for end in ends:
            out.append((start, end))
            start = end + 1
    return out


def _eager_attention_clusters(units: list[_Unit]) -> list[tuple[int, int]]:
    """Attention written out (matmul, softmax, matmul): a softmax between two GEMMs. A router's
    softmax is followed by top-k, not by a GEMM, so it never qualifies."""
    clusters = []
    for i, unit in enumerate(units):
        if unit.kind != "softmax":
            continue
        before = next((j for j in range(i - 1, -1, -1) if units[j].kind not in MINOR), None)
        after = next((j for j in range(i + 1, len(units)) if units[j].kind not in MINOR), None)
        if before is None or after is None:
            continue
        if units[before].kind == "gemm" and units[after].kind == "gemm" and (not clusters or before > clusters[-1][1]):
            clusters.append((before, after))
    return clusters


def _pre_walk(units: list[_Unit], start: int, end: int) -> list[int]:
    """The comparable units before a core, from the core backwards, up to the first that ends a layer.

    A collective ends the previous layer (a row-parallel reduction), except one right after a norm:
    with tensor-parallel attention over expert parallelism, each layer normalises its tokens and
    then gathers them from every rank before its projections (SGLang's layer communicator), so that
    collective and the norm before it begin the layer."""
    walk: list[int] = []
    j = end - 1
    while j >= start:
        kind = units[j].kind
        if kind in _NOT_PRE:
            previous = _previous_not_view(units, start, j)
            if kind != "allreduce" or previous is None or units[previous].kind != "norm" or not walk:
                break
        if kind != "view":
            walk.append(j)
        j -= 1
    return walk


def _previous_not_view(units: list[_Unit], start: int, j: int) -> int | None:
    return next((i for i in range(j - 1, start - 1, -1) if units[i].kind != "view"), None)


def _walk_keys(units: list[_Unit], walk: list[int]) -> list[tuple[tuple, int]]:
    """(comparison key, earliest walk position) per step of a walk: a run of norms is one step keyed by
    the norm kernels it runs (a graph replay hops streams, so a layer's q_a and kv_a norms are one or
    two units of the chain depending on where the chain forks), and a collective joins the norm run
    before it; copies and GEMMs compare by kind (a GEMM's tile, and so its kernel name, follows the
    token count: with two-batch overlap the dense layers run the whole batch, the micro-layers half of
    it, and compared by name layer 0's q_a and q_b fell outside it), the rest by name."""
    out: list[tuple[tuple, int]] = []
    for pos, j in enumerate(walk):
        kind = units[j].kind
        if kind in ("norm", "allreduce") and out and out[-1][0][0] == "norm":
            names = out[-1][0][1] | ({units[j].names} if kind == "norm" else {("collective",)})
            out[-1] = (("norm", names), pos)
            continue
        if kind in ("norm", "allreduce"):
            out.append((("norm", frozenset({units[j].names if kind == "norm" else ("collective",)})), pos))
            continue
        out.append(((kind,) if kind == "memory" or kind in GEMM_LIKE else units[j].names, pos))
    return out


def _pre_lengths(units: list[_Unit], clusters: list[tuple[int, int]]) -> list[int]:
    """How many units before each attention core belong to its layer.

    The longest tail shared by the stretches before every core (the kernels before layer 0 are
    the embedding, before other layers the previous layer's MLP or experts, so the shared tail
    stops at the layer border), extended over norms that differ only in the first layer (a plain
    RMSNorm there, a fused residual-add RMSNorm elsewhere). Never past a unit of the expert path
    or a collective, which end the previous layer (but a gather right after the input norm, which
    begins this one: _pre_walk). Copies compare by kind, runs of norms as one, CPU shape operators
    not at all: layers that alternate sliding and full attention update their KV caches with
    different copies and views, but compute the same.
    """
    regions = []
    previous_end = -1
    for lo, _hi in clusters:
        regions.append((previous_end + 1, lo))
        previous_end = _hi
    walks = [_pre_walk(units, start, end) for start, end in regions]
    if len(regions) < 2:
        return [_role_pre_length(units, regions[0], walks[0])] if regions else []

    keyed = [_walk_keys(units, walk) for walk in walks]
    # a core right after the previous one (layers split by _split_merged_layers) has nothing before it
    compared = [keys for (start, end), keys in zip(regions, keyed) if end > start]
    shared = 0
    while compared and all(shared < len(keys) for keys in compared) and len(
            {keys[shared][0] for keys in compared}) == 1:
        shared += 1
    if shared == 0:
        return [_role_pre_length(units, region, walk) for region, walk in zip(regions, walks)]
    # one more step where (nearly) every layer has a norm run there: the first layer's plain norm
    # against the others' fused residual add, or a gather that only layers after a MoE layer need
    room = [keys for keys in compared if shared < len(keys)]
    extended = bool(room) and len(room) >= len(compared) - 1 and all(keys[shared][0][0] == "norm" for keys in room)
    lengths = []
    for (_start, end), walk, keys in zip(regions, walks, keyed):
        if not walk:
            lengths.append(0)
            continue
        taken = keys[min(shared, len(keys)) - 1][1]
        if extended and shared < len(keys) and keys[shared][0][0] == "norm":
            taken = keys[shared][1]
        lengths.append(end - walk[taken])
    return lengths


def _role_pre_length(units: list[_Unit], region: tuple[int, int], walk: list[int]) -> int:
    """One layer (or no shared tail): the pre part starts at the earliest norm before the core
    that no expert, collective or other layer-ending unit precedes."""
    _start, end = region
    norms = [j for j in walk if units[j].kind == "norm"]
    if norms:
        return end - norms[-1]
    return end - walk[-1] if walk else 0


def _post_start(units: list[_Unit], after_last: int, input_norm: tuple[tuple[int, ...], ...]) -> int:
    """Where the kernels after the last layer begin: the final norm before the LM head.

    The final norm is the same kernels as each layer's input norm; failing that, the last norm
    that a GEMM (the LM head) follows. Without either, everything belongs to the last layer.
    """
    n = len(units)
    gemms_after = [j for j in range(after_last, n) if units[j].kind in GEMM_LIKE]
    if not gemms_after:
        return n
    last_gemm = gemms_after[-1]
    size = len(input_norm)
    if size:
        for j in range(last_gemm - size, after_last - 1, -1):
            if tuple(u.names for u in units[j:j + size]) == input_norm:
                return j
    for j in range(last_gemm - 1, after_last - 1, -1):
        if units[j].kind == "norm":
            while j - 1 >= after_last and units[j - 1].kind == "norm":
                j -= 1
            return j
    return n


def _final_norm_start(units: list[_Unit], clusters: list[tuple[int, int]], starts: list[int],
                      norm_pieces: set[tuple[int, ...]]) -> int | None:
    """Where the final norm begins: the first norm after the last core beyond the norms every layer
    has after its core (the post-attention norm; more on models with pre/post-MLP norms). None when
    there are too few layers to tell; len(units) when the trace ends with the last layer."""
    if len(clusters) < 2:
        return None
    per_layer = Counter(len(_norm_runs(units, hi + 1, nxt)) for (_lo, hi), nxt in zip(clusters, starts[1:]))
    usual = per_layer.most_common(1)[0][0]
    runs = _norm_runs(units, clusters[-1][1] + 1, len(units))
    if len(runs) == usual and _layers_end_with_a_norm(units, clusters, starts) and any(
            units[j].kind in GEMM_LIKE for j in range(runs[-1][1] + 1, len(units))):
        # each layer ends with the next layer's input norm (its pre part starts at the QKV GEMM): the
        # last layer ends with the final norm, and the GEMM after it is the LM head
        return runs[-1][1] + 1
    if len(runs) <= usual:
        return len(units)
    start = runs[usual][0]
    while start - 1 > clusters[-1][1] and units[start - 1].kind in MINOR and units[start - 1].names in norm_pieces:
        start -= 1
    return start


def _layers_end_with_a_norm(units: list[_Unit], clusters: list[tuple[int, int]], starts: list[int]) -> bool:
    """True when nearly every layer but the last ends with a norm (only small kernels after it);
    nearly: a trace whose kernel order is broken in places still shows the layers' shape."""
    ending = 0
    for (_lo, hi), nxt in zip(clusters, starts[1:]):
        runs = _norm_runs(units, hi + 1, nxt)
        ending += bool(runs) and all(units[j].kind in MINOR for j in range(runs[-1][1] + 1, nxt))
    return ending >= 0.8 * (len(clusters) - 1)


def _next_not_minor(units: list[_Unit], start: int, stop: int) -> int | None:
    return next((j for j in range(start, stop) if units[j].kind not in MINOR), None)


class _LayerNamer:
    """Roles for the units of one layer: pre part, attention core, post part."""

    def __init__(self, units: list[_Unit], input_norm_names: set[tuple[int, ...]]):
        self.units = units
        self.input_norm_names = input_norm_names

    def name(self, lo: int, core_lo: int, core_hi: int, hi: int) -> tuple[dict[int, Named], bool]:
        """Each unit's (role, rule) of the layer [lo, hi] whose attention core is [core_lo, core_hi]."""
        roles: dict[int, Named] = {}
        absorbed_mla = self._pre(lo, core_lo, roles)
        for j in range(core_lo, core_hi + 1):
            roles[j] = ("attn_core", _R["core.attention_cluster"])
        moe = self._post(core_hi + 1, hi + 1, absorbed_mla, roles)
        self._buffer_copies(lo, hi + 1, roles)
        return roles, moe

    def _buffer_copies(self, lo: int, end: int, roles: dict[int, Named]) -> None:
        """A copy right before or after an all-reduce moves data in or out of its buffer (vLLM's
        symmetric-memory all-reduce launches it from inside the all-reduce): the all-reduce's time."""
        units = self.units
        for k in range(lo, end):
            if units[k].kind == "memory" and any(lo <= n < end and units[n].kind == "allreduce" for n in (k - 1, k + 1)):
                roles[k] = ("all_reduce", _R["layer.collective_buffer_copy"])

    # -- before the attention core
    def _pre(self, lo: int, end: int, roles: dict[int, Named]) -> bool:
        """Input norm, projections, the norms between them, rotary; True for absorbed MLA."""
        units = self.units
        gemms = [j for j in range(lo, end) if units[j].kind in GEMM_LIKE]
        if not gemms:
            for j in range(lo, end):
                roles[j] = self._tail_role(units[j].kind, ("input_layernorm", _R["pre.no_projection"]))
            return False
        for j in range(lo, gemms[0]):  # the input norm, and the gather of every rank's tokens after it
            roles[j] = (("all_reduce", _R["pre.gather_after_input_norm"]) if units[j].kind == "allreduce"
                        else ("input_layernorm", _R["pre.input_norm"]))
        gaps = list(zip(gemms, [*gemms[1:], end]))
        extents = [self._norm_extent(a + 1, b) for a, b in gaps]
        inner = [e for e, (a, b) in zip(extents, gaps) if e is not None and b != end]
        rotary_before_last = len(gemms) >= 2 and any(units[j].kind == "rotary" for j in range(gemms[-2] + 1, gemms[-1]))
        form = attention_form(len(inner), len(gemms), rotary_before_last)
        absorbed = form == ABSORBED_MLA
        projections = _R[_PROJECTION_RULES.get(form, "pre.projections")]
        before_norm = sum(1 for j in gemms if inner and j < inner[0][0])
        for j, role in zip(gemms, projection_roles(form, len(gemms), before_norm)):
            roles[j] = (role, projections)
        inner_roles = iter(inner_norm_roles(form, len(inner)))
        has_rotary = any(units[j].kind == "rotary" for j in range(lo, end))
        for (a, b), extent in zip(gaps, extents):
            norm_role = (next(inner_roles) if b != end else "qk_norm") if extent is not None else None
            default = ("attn_core", _R["pre.before_core"]) if b == end else ("self_attn", _R["pre.among_projections"])
            rest = [j for j in range(a + 1, b) if extent is None or not extent[0] <= j <= extent[1]]
            # no rotary kernel on this stack: the rotary embedding is written out (mul, add, cat):
            # the stretch of arithmetic kernels among the projections or right before the core
            arithmetic = [j for j in rest if units[j].kind == "elementwise"] if not has_rotary else []
            rotary = (arithmetic[0], arithmetic[-1]) if len(arithmetic) >= 2 else None
            for j in range(a + 1, b):
                if extent is not None and extent[0] <= j <= extent[1]:
                    roles[j] = (norm_role, _R["pre.projection_norm"])
                elif rotary is not None and rotary[0] <= j <= rotary[1]:
                    roles[j] = ("rotary_emb", _R["pre.rotary_written_out"])
                else:
                    roles[j] = self._tail_role(units[j].kind, default)
        return absorbed

    def _norm_extent(self, start: int, end: int) -> tuple[int, int] | None:
        """The units of a norm inside [start, end): its norm kernels and the small kernels around
        them that the input norm also runs (an unfused RMSNorm: copy, pow, mean, add, rsqrt, mul...)."""
        norms = [j for j in range(start, end) if self.units[j].kind == "norm"]
        if not norms:
            return None
        lo, hi = norms[0], norms[-1]
        while lo - 1 >= start and self._norm_piece(lo - 1):
            lo -= 1
        while hi + 1 < end and self._norm_piece(hi + 1):
            hi += 1
        return lo, hi

    def _norm_piece(self, j: int) -> bool:
        unit = self.units[j]
        return unit.kind in MINOR and unit.names in self.input_norm_names

    @staticmethod
    def _tail_role(kind: str, default: Named, by_class: str = _R["pre.by_class"]) -> Named:
        """The role a kernel's class names (pre.by_class), else the default (role, rule)."""
        if kind == "rotary":
            return "rotary_emb", by_class
        if kind in ("kv_write", "attn_core", "attn_aux", "indexer"):
            return "attn_core", by_class
        if kind == "allreduce":
            return "all_reduce", by_class
        return default

    # -- after the attention core
    def _post(self, start: int, end: int, absorbed_mla: bool, roles: dict[int, Named]) -> bool:
        units = self.units
        stops = {"norm", "allreduce", "act", "softmax"} | EXPERT_PATH | ROUTING
        j = start
        outs = []
        while j < end and units[j].kind not in stops:
            if units[j].kind in GEMM_LIKE:
                outs.append(j)
            j += 1
        o_end = outs[-1] + 1 if outs else start
        for k in range(start, o_end):
            roles[k] = ("o_proj", _R["post.o_proj"])
        if absorbed_mla and len(outs) >= 2:
            for k in outs[:-1]:
                roles[k] = ("w_vc_bmm", _R["post.w_vc_absorbed"])
        j = o_end
        ffn = next((k for k in range(j, end) if units[k].kind in GEMM_LIKE | ROUTING | EXPERT_PATH | {"act"}), end)
        first_norm = next((k for k in range(j, ffn) if units[k].kind == "norm"), ffn)
        # between o_proj and the post-attention norm: the tensor-parallel all-reduce (the copies in
        # and out of its buffer are its own: _buffer_copies) and o_proj's other kernels, or else the residual add
        reduced = any(units[k].kind == "allreduce" for k in range(j, first_norm))
        for k in range(j, ffn):
            if units[k].kind == "allreduce":
                roles[k] = ("all_reduce", _R["post.collective"])
            elif k < first_norm:
                roles[k] = ("o_proj", _R["post.o_proj_before_reduce"]) if reduced else ("residual_add",
                                                                                      _R["post.residual_add"])
            else:
                roles[k] = ("post_attention_layernorm", _R["post.attention_norm"])
        moe = any(units[k].kind in EXPERT_PATH | ROUTING for k in range(ffn, end))
        if moe:
            self._moe(ffn, end, roles)
        else:
            self._dense(ffn, end, roles)
        return moe

    def _dense(self, start: int, end: int, roles: dict[int, Named]) -> None:
        units = self.units
        gemms = [k for k in range(start, end) if units[k].kind in GEMM_LIKE]
        if not gemms:
            for k in range(start, end):
                roles[k] = ("all_reduce" if units[k].kind == "allreduce" else "mlp_act", _R["dense.no_gemm"])
            return
        for k in range(start, end):
            kind = units[k].kind
            if kind == "allreduce":
                roles[k] = ("all_reduce", _R["dense.collective"])
            elif k == gemms[-1]:
                roles[k] = ("down_proj", _R["dense.down_proj"])
            elif k in gemms or k < gemms[0]:
                roles[k] = ("gate_up_proj", _R["dense.gate_up_proj"])
            elif k < gemms[-1]:
                roles[k] = ("mlp_act", _R["dense.act"])
            else:
                roles[k] = ("residual_add", _R["dense.residual_add"])

    def _moe(self, start: int, end: int, roles: dict[int, Named]) -> None:
        units = self.units
        router = self._router(start, end)
        route_from = router if router is not None else next(
            (k for k in range(start, end) if units[k].kind in ("topk", "softmax")), start)
        # the routing chain: top-k / softmax and the small kernels among them, then the weights'
        # arithmetic after the last top-k; a copy or a reshape starts the experts' own work
        k = route_from + 1 if router is not None else route_from
        # the shared expert launched between the router GEMM and top-k (SGLang's DeepEP path runs it on
        # a second stream there): its GEMM chain comes before the routing, not among the routed experts
        shared_first = self._shared_before_topk(k, end) if router is not None else None
        if shared_first is not None:
            k = shared_first[1] + 1
            while k < end and units[k].kind not in ("topk", "softmax"):
                k += 1
        last_routing = k - 1
        while k < end and units[k].kind in {"topk", "softmax"} | MINOR:
            if units[k].kind in ("topk", "softmax"):
                last_routing = k
            k += 1
        experts_from = last_routing + 1
        while experts_from < k and units[experts_from].kind == "elementwise":
            experts_from += 1
        first_routing = next((j for j in range(route_from, experts_from) if units[j].kind in ("topk", "softmax")),
                             experts_from)
        routed_end = max((k for k in range(experts_from, end) if units[k].kind in _ROUTED_END), default=None)
        if routed_end is None:
            gemms_after = [k for k in range(experts_from, end) if units[k].kind in GEMM_LIKE]
            routed_end = gemms_after[-1] if gemms_after else experts_from - 1
        shared = shared_first or self._shared_span(start, route_from) or self._shared_span(routed_end + 1, end)
        # after the routed experts (and the shared ones, if they run last): GEMMs and scores there
        # gate the shared expert's output; what follows the last of them is the residual add
        tail_gemms = [k for k in range(routed_end + 1, end) if units[k].kind in GEMM_LIKE | {"softmax"}
                      and not (shared and shared[0] <= k <= shared[1])]
        first_tail_gemm = tail_gemms[0] if tail_gemms else end
        last_tail_gemm = max(tail_gemms, default=routed_end)

        for k in range(start, end):
            kind = units[k].kind
            if kind == "allreduce":
                roles[k] = ("all_reduce", _R["moe.collective"])
            elif shared and shared[0] <= k <= shared[1]:
                roles[k] = ("shared_experts", _R["moe.shared_span"])
            elif k < route_from:
                roles[k] = (("post_attention_layernorm", _R["moe.norm_before_router"]) if kind in MINOR | {"norm"}
                            else ("shared_experts", _R["moe.shared_before_router"]))
            elif router is not None and k == router:
                roles[k] = ("router", _R["moe.router"])
            elif shared_first is not None and route_from < k < first_routing:
                # the shared expert's own small kernels (activation, quantisation)
                roles[k] = ("shared_experts", _R["moe.shared_small_before_topk"])
            elif k < experts_from:
                # before the first top-k kernel, a quantisation or copy prepares the experts' input
                before_topk = k < first_routing and kind in ("quant", "memory")
                roles[k] = ("experts", _R["moe.expert_input"]) if before_topk else ("topk", _R["moe.topk"])
            elif k <= routed_end:
                continue  # named below, in order
            elif (shared and shared[0] > routed_end and k > shared[1]) or (tail_gemms and k > last_tail_gemm):
                roles[k] = ("residual_add" if kind in MINOR else "experts", _R["moe.after_experts"])
            elif kind in GEMM_LIKE or kind == "softmax" or k > first_tail_gemm:
                roles[k] = ("shared_experts", _R["moe.shared_gate"])  # a gate on the shared expert's output (Qwen2-MoE)
            else:  # after an all-to-all that brought the tokens back: the combine's (unpermute, weighted sum)
                brought_back = units[routed_end].kind in ("combine", "a2a")
                roles[k] = ("combine" if brought_back or kind in ("moe_finalize", "combine", "a2a") else "experts",
                            _R["moe.after_routed"])
        self._routed(experts_from, routed_end + 1, roles)

    def _router(self, start: int, end: int) -> int | None:
        units = self.units
        for k in range(start, end):
            kind = units[k].kind
            if kind == "router_gemm":
                return k
            if kind in EXPERT_PATH:
                return None
            if kind in GEMM_LIKE:
                nxt = _next_not_minor(units, k + 1, end)
                if nxt is not None and units[nxt].kind in ("topk", "softmax"):
                    return k
        return None

    def _shared_before_topk(self, start: int, end: int) -> tuple[int, int] | None:
        """GEMMs (two or more: an MLP) right after the router and before the first top-k, with nothing
        of the routed path among them: the shared expert, launched before the routing."""
        gemms = []
        for k in range(start, end):
            kind = self.units[k].kind
            if kind in ("topk", "softmax"):
                return (gemms[0], gemms[-1]) if len(gemms) >= 2 else None
            if kind in EXPERT_PATH or kind in ("allreduce", "norm"):
                return None
            if kind in GEMM_LIKE:
                gemms.append(k)
        return None

    def _shared_span(self, start: int, end: int) -> tuple[int, int] | None:
        gemms = [k for k in range(start, end) if self.units[k].kind in GEMM_LIKE]
        return (gemms[0], gemms[-1]) if len(gemms) >= 2 else None

    def _routed(self, start: int, end: int, roles: dict[int, Named]) -> None:
        units = self.units
        gemms = [k for k in range(start, end) if units[k].kind in GEMM_LIKE]
        calls = [gemms.index(k) + 1 if k in gemms else None for k in range(start, end)]
        for k, named in zip(range(start, end), routed_rules([units[k].kind for k in range(start, end)], calls)):
            roles[k] = named


_ROUTED_RULE = {role: _R[name] for role, name in (
    ("up_gate_gemm", "routed.up_gate"), ("down_gemm", "routed.down"), ("expert_act", "routed.act"),
    ("dispatch", "routed.dispatch"), ("combine", "routed.combine"), ("all_reduce", "routed.collective"),
    ("experts", "routed.other"))}


def routed_rules(kinds: list[str], gemm_calls: list[int | None]) -> list[Named]:
    """routed_roles, each with the rule that gave it (each role of the stretch has one rule)."""
    return [(role, _ROUTED_RULE[role]) for role in routed_roles(kinds, gemm_calls)]


def cut_structural(kernels: list[Kernel], times: StepTimes | None = None, chain: list[int] | None = None
                   ) -> LayerCut | None:
    """Layers and roles of one step's kernels (in start order, as steps hold them), or None when
    no attention core is found; `times`: the kernels' times, where the caller has them; `chain`: the
    positions chain_positions gives, where they were read with other steps (step_shapes.py)."""
    if not kernels:
        return None
    main_idx = chain if chain is not None else chain_positions(kernels, times)
    plan = _layer_plan(_chain_key(kernels, main_idx))
    if plan is None:
        return None
    slots: list[Slot | None] = [None] * len(kernels)
    for i, slot in zip(main_idx, plan.slots):  # shared by the steps of one plan: never changed in place
        slots[i] = slot
    if len(main_idx) < len(kernels):  # kernels off the chain
        _place_side_streams(kernels, main_idx, slots, plan, times)
    layout = plan.layout
    return LayerCut([s for s in slots if s is not None], layout.layers, layout.detail, moe_layers=layout.moe_layers,
                    chain=main_idx)


@dataclass(frozen=True)
class _Layout:
    """What a chain's shape decides (_chain_shape), whatever the timing: per unit its section, layer,
    (role, rule) and whether its layer is MoE; per layer where its attention core ends and whether it
    is MoE; which chain positions are in layers."""

    units: tuple[_Unit, ...]
    core_ends: tuple[int, ...]  # chain position of each layer's last attention-core kernel
    layer_moe: dict[int, bool]
    layer_firsts: tuple[tuple[int, int], ...]  # (layer, chain position of its first kernel), by layer
    in_layers: tuple[int, ...]  # chain positions of the kernels in layers
    position_slots: tuple[tuple[str, int, Named, bool], ...]  # (section, layer, named, MoE) per chain position
    layers: int
    moe_layers: int
    detail: str
    # chain positions in layers whose kernel may be a combine (placed so, or a collective named by its kernel)
    combine_candidates: tuple[int, ...] = ()
    # the label names and slots of the last plan made of this layout (_layer_plan): chains of one shape
    # mostly differ in a few names, and the other positions keep their slots
    last_plan: list = field(default_factory=list, compare=False, repr=False)


@dataclass(frozen=True)
class _LayerPlan:
    """A chain's layout with each chain kernel's slot (its D4 row and its own name's label)."""

    slots: tuple[Slot, ...]  # per chain kernel (shared by every step of the plan: replaced, never changed)
    layout: _Layout


_UNPLACED = (SECTION_LAYER, 0, ("layer_other", _R["layer.unplaced"]), True)


@functools.lru_cache(maxsize=64)
def _layer_plan(key: _ChainKey) -> _LayerPlan | None:
    """The layers of a chain (cached: a decode run repeats a few chains): its shape's layout, with
    each kernel's D4 label from its name. A chain whose shape was planned before with other names
    (a GEMM named for its batch size) takes that plan's slots where the names agree."""
    layout = _layout(_chain_shape(key))
    if layout is None:
        return None
    names, roots, _calls = key
    # a CPU operator is labelled and classed by its outermost call
    label_names = tuple([root or name for root, name in zip(roots, names)]) if roots else names
    if layout.last_plan:
        last_names, last_slots = layout.last_plan
        slots = list(last_slots)
        for p in itertools.compress(range(len(label_names)), map(operator.ne, label_names, last_names)):
            slots[p] = _slot_of(layout.position_slots[p], label_names[p])
    else:
        slots = list(map(_slot_of, layout.position_slots, label_names))
    plan = _LayerPlan(tuple(slots), layout)
    layout.last_plan[:] = (label_names, plan.slots)
    return plan


def _slot_of(placed: tuple[str, int, Named, bool], name: str) -> Slot:
    """A chain kernel's slot: its place in the layout, labelled by its name (a collective's role too)."""
    section, layer, (role, why), moe = placed
    if role == "all_reduce":  # which collective: from its name
        role = collective_role(name)
    row = row_of(role, moe)
    return Slot(section, layer, row.group, row.module, name_label(name), SOURCE_STRUCTURE, role, why)


@functools.lru_cache(maxsize=64)
def _layout(shape: _ChainShape) -> _Layout | None:
    """The layers of a chain's shape, from its units alone; None without an attention core."""
    units = _units_of(shape)
    clusters = _attention_clusters(units)
    if not clusters:
        return None
    pre = _pre_lengths(units, clusters)
    starts = [lo - p for (lo, _hi), p in zip(clusters, pre)]
    first_gemm = [next((j for j in range(s, lo) if units[j].kind in GEMM_LIKE), lo) for s, (lo, _hi) in zip(starts, clusters)]
    input_norms = [tuple(u.names for u in units[s:g]) for s, g in zip(starts, first_gemm)]
    reference = input_norms[1] if len(input_norms) > 1 else input_norms[0]
    norm_pieces = {names for norm in input_norms for names in norm}
    post_start = _final_norm_start(units, clusters, starts, norm_pieces)
    if post_start is None:
        post_start = _post_start(units, clusters[-1][1] + 1, reference)
    ends = [*(s - 1 for s in starts[1:]), post_start - 1]
    namer = _LayerNamer(units, norm_pieces)
    unit_slot: list[tuple[str, int, Named, bool] | None] = [None] * len(units)
    moe_layers = 0
    # A layer's roles depend only on its own units (kinds and names) and where its core sits in them
    # (_LayerNamer reads nothing outside lo..hi but the chain's input norms): layers of one shape
    # are named once per chain, their roles kept relative to the layer's first unit.
    by_shape: dict[tuple, tuple[list[tuple[int, Named]], bool]] = {}
    for layer, ((core_lo, core_hi), lo, hi) in enumerate(zip(clusters, starts, ends)):
        shape = (tuple([(u.kind, u.names) for u in units[lo:max(hi, core_hi) + 1]]), core_lo - lo, core_hi - lo)
        named = by_shape.get(shape)
        if named is None:
            roles, moe = namer.name(lo, core_lo, core_hi, hi)
            named = by_shape[shape] = ([(j - lo, role) for j, role in roles.items()], moe)
        relative, moe = named
        moe_layers += moe
        for offset, role in relative:
            unit_slot[lo + offset] = (SECTION_LAYER, layer, role, moe)
    for j in range(0, starts[0]):
        unit_slot[j] = (SECTION_PRE, -1, (_outside_role(units[j].kind, "embedding"), _R["outside.before_layers"]), True)
    for j in range(post_start, len(units)):
        unit_slot[j] = (SECTION_POST, -1, (_outside_role(units[j].kind, "lm_head"), _R["outside.after_layers"]), True)
    layer_moe = {placed[1]: placed[3] for placed in unit_slot if placed and placed[0] == SECTION_LAYER}
    placed_slots = tuple(placed or _UNPLACED for placed in unit_slot)
    in_layers = tuple(p for unit, placed in zip(units, placed_slots) if placed[0] == SECTION_LAYER
                      for p in range(unit.lo, unit.hi + 1))
    firsts: dict[int, int] = {}
    for unit, placed in zip(units, placed_slots):
        if placed[0] == SECTION_LAYER:
            firsts.setdefault(placed[1], unit.lo)
    detail = f"{len(clusters)} layers by attention cores ({moe_layers} MoE, {len(clusters) - moe_layers} dense)"
    position_slots = tuple(placed for unit, placed in zip(units, placed_slots) for _p in range(unit.lo, unit.hi + 1))
    combine_candidates = tuple(p for p in in_layers if position_slots[p][2][0] in ("combine", "all_reduce"))
    return _Layout(tuple(units), tuple(units[hi].hi for _lo, hi in clusters), layer_moe,
                   tuple(sorted(firsts.items())), in_layers, position_slots, len(clusters), moe_layers, detail,
                   combine_candidates)


def _outside_role(kind: str, default: str) -> str:
    """Before or after the layers, collectives stay visible as communication."""
    return "outside_collective" if kind in COMMUNICATION else default


def _last_end_us(kernels: list[Kernel], main_idx: list[int], positions: tuple[int, ...],
                 times: StepTimes | None) -> float:
    """The latest end among the chain's kernels at these chain positions (-inf: none)."""
    if not positions:
        return float("-inf")
    if times is not None:
        from analysis.numeric import np

        chain = np.array(main_idx, dtype=np.int64)
        return float(times.end_us[chain[np.array(positions, dtype=np.int64)]].max())
    return max(kernels[main_idx[p]].start_us + kernels[main_idx[p]].dur_us for p in positions)


def _place_side_streams(kernels: list[Kernel], main_idx: list[int], slots: list[Slot | None], plan: _LayerPlan,
                        times: StepTimes | None = None) -> None:
    """Kernels off the chain join the layer whose chain span holds their start. While the
    layer's attention runs, a side stream helps it (SGLang runs the q_a / kv_a norms there); after
    it, in a MoE layer, a side stream that runs GEMMs carries the shared experts (overlapped with
    the combine); collectives keep their own role; the rest is `other`."""
    layout = plan.layout
    layer_moe = layout.layer_moe
    # where each layer's attention ends on the main stream (its core's last kernel)
    attention_end = {layer: kernels[main_idx[p]].end_us for layer, p in enumerate(layout.core_ends)}
    # each layer's first start: the chain runs in start order, so its first kernel's
    layers = [layer for layer, _p in layout.layer_firsts]
    starts = [kernels[main_idx[p]].start_us for _layer, p in layout.layer_firsts]
    last_end = _last_end_us(kernels, main_idx, layout.in_layers, times)
    combine_end: dict[int, float] = {}  # per layer, where its combine ended on the chain
    for p in layout.combine_candidates:
        if plan.slots[p].role == "combine":
            k = kernels[main_idx[p]]
            layer = plan.slots[p].unit
            combine_end[layer] = max(combine_end.get(layer, float("-inf")), k.start_us + k.dur_us)
    by_layer_stream: dict[tuple[int, int], list[int]] = {}
    for i in [i for i, slot in enumerate(slots) if slot is None]:  # the kernels off the chain, in order
        k = kernels[i]
        pos = bisect.bisect_right(starts, k.start_us) - 1
        if pos < 0 or k.start_us >= last_end:
            section, role, why = ((SECTION_PRE, "embedding", _R["outside.before_layers"]) if pos < 0
                                  else (SECTION_POST, "lm_head", _R["outside.after_layers"]))
            role = _outside_role(kernel_class(k), role)
            row = row_of(role)
            slots[i] = Slot(section, -1, row.group, row.module, kernel_label(k), SOURCE_STRUCTURE, role, why)
        else:
            by_layer_stream.setdefault((layers[pos], k.stream), []).append(i)
    for (layer, _stream), members in by_layer_stream.items():
        moe = layer_moe.get(layer, False)
        kinds = [kernel_class(kernels[i]) for i in members]
        ffn = [kind for i, kind in zip(members, kinds) if kernels[i].start_us >= attention_end.get(layer, float("inf"))]
        runs_gemm = any(kind in GEMM_LIKE for kind in ffn)
        for i, kind in zip(members, kinds):
            if kernels[i].start_us < attention_end.get(layer, float("-inf")) and kind not in COMMUNICATION:
                during = _R["side.during_attention"]
                role, why = ("q_a_kv_a_layernorm", during) if kind == "norm" else _LayerNamer._tail_role(
                    kind, ("self_attn", during), during)
            elif kind == "allreduce":
                role, why = "all_reduce", _R["side.collective"]
            elif kind in ("dispatch", "combine"):
                role, why = kind, _R["side.dispatch_combine"]
            elif kind in ("topk", "router_gemm"):
                role, why = "topk" if kind == "topk" else "router", _R["side.routing"]
            elif moe and kind not in GEMM_LIKE and kernels[i].start_us >= combine_end.get(layer, float("inf")):
                role, why = "combine", _R["side.after_combine"]
            elif moe and runs_gemm:
                role, why = "shared_experts", _R["side.shared_experts"]
            else:
                role, why = "layer_other", _R["side.other"]
            if role == "all_reduce":
                role = collective_role(kernels[i].name)
            row = row_of(role, moe)
            slots[i] = Slot(SECTION_LAYER, layer, row.group, row.module, kernel_label(kernels[i]), SOURCE_STRUCTURE,
                            role, why)


def count_attention_cores(kernels: list[Kernel]) -> int:
    """Attention cores on the step's chain across streams (chain.py): the layer count a step of
    these kernels would have."""
    if not kernels:
        return 0
    return len(_attention_clusters(_main_stream_units(kernels)[2]))


def split_at_step_borders(kernels: list[Kernel]) -> list[list[Kernel]]:
    """Cut a stretch that holds several steps (no step markers, no idle gap between them) into steps.

    Why it can be found: the stretches between consecutive attention cores repeat with the layer
    pattern of the model (dense then MoE, or all alike), except the one that crosses from one step
    to the next, which holds the final norm, the LM head and the next step's embedding: one more
    norm than any stretch inside a step. So the sequence of stretch shapes is periodic, with the
    layer count as period; the stretch with the most norms in each period is the border, and the
    step is cut at the longest pause of the main stream inside it (the host between two forwards).
    """
    if not kernels:
        return []
    _main, main_idx, units = _main_stream_units(kernels)
    clusters = _attention_clusters(units)
    if len(clusters) < 3:
        return [kernels]
    shapes = [_stretch_shape(units, a_hi + 1, b_lo) for (_a_lo, a_hi), (b_lo, _b_hi) in zip(clusters, clusters[1:])]
    period = next((p for p in range(2, len(shapes) + 1)
                   if all(shapes[i] == shapes[i + p] for i in range(len(shapes) - p))), None)
    if period is None or period > len(shapes):
        return [kernels]
    norm_runs = [shape[0] for shape in shapes[:period]]
    border = max(range(period), key=lambda i: norm_runs[i])
    if norm_runs.count(norm_runs[border]) != 1:
        return [kernels]
    cuts = []
    for r in range(border, len(shapes), period):
        (_lo, hi), next_lo = clusters[r], clusters[r + 1][0]
        runs = _norm_runs(units, hi + 1, next_lo)
        if len(runs) < 3:
            continue
        # the border stretch: post-attention norm, experts or MLP, final norm, LM head, sampling,
        # the next step's embedding, then the first layer's input norm (the third norm)
        final_end, next_start = runs[1][1], runs[2][0]
        lm_head = next((j for j in range(final_end + 1, next_start) if units[j].kind in GEMM_LIKE), final_end)
        first, last = units[lm_head].hi + 1, units[next_start].lo
        cut = max(range(first, last + 1),
                  key=lambda p: kernels[main_idx[p]].start_us - kernels[main_idx[p - 1]].end_us, default=last)
        cuts.append(kernels[main_idx[cut]].start_us)
    if not cuts:
        return [kernels]
    pieces: list[list[Kernel]] = [[] for _ in range(len(cuts) + 1)]
    for k in kernels:
        pieces[bisect.bisect_right(cuts, k.start_us)].append(k)
    return [p for p in pieces if p]


def _norm_runs(units: list[_Unit], start: int, end: int) -> list[tuple[int, int]]:
    """(first, last) unit of each separate norm in [start, end): norm units with only small kernels between."""
    runs: list[tuple[int, int]] = []
    for j in range(start, end):
        kind = units[j].kind
        if kind == "norm":
            if runs and all(units[m].kind in MINOR for m in range(runs[-1][1] + 1, j)):
                runs[-1] = (runs[-1][0], j)
            else:
                runs.append((j, j))
    return runs


def _stretch_shape(units: list[_Unit], start: int, end: int) -> tuple[int, frozenset[str]]:
    """What a stretch between two attention cores holds: its separate norms and its kinds of kernels."""
    return len(_norm_runs(units, start, end)), frozenset(
        units[j].kind for j in range(start, end) if units[j].kind not in MINOR)
