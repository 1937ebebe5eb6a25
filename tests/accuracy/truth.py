"""The accuracy suite's ground truth: a trace's own ranges, read with the standard library alone.

Why apart: a truth computed by the analysis it judges moves with it (an error in a naming rule
both share shows as agreement). This module imports nothing from `analysis` or `harness`
(tests/test_accuracy_truth.py checks it) and shares no pattern with them: its table is
tests/accuracy/table.py.

What it does: each GPU kernel (memcpy and memset included; a CPU-only trace's operators by their
self time) is placed by its CPU launch (the runtime call with the same correlation id) in the
launching thread's python ranges (`nn.Module: Class_N` calls and recorded python functions).
Steps are model forwards (the outermost model-class call; SGLang's NextN draft model is a model
of its own); a unit belongs to the last forward launched before it. Layers are decoder-layer
calls; the path from the layer down to the innermost range names the D4 row (table.py), with the
qualified module names the corpus' meta files record where there are some. A CUDA-graph replay has
no ranges: its kernels take the names of its eager twin's, aligned by kernel name in order
(difflib), on the replay's own durations.
"""
from __future__ import annotations

import bisect
import difflib
import gzip
import json
import re
from collections import Counter
from dataclasses import dataclass, field

from . import table as T

_INSTANCE = re.compile(r"^nn\.Module: (?P<cls>.+?)_(?P<n>\d+)$")
_GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_LAUNCH_CATS = ("cuda_runtime", "cuda_driver")


def read_events(path: str) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


@dataclass
class Node:
    """One python range (a module call or a function) on one thread."""

    name: str
    start: float
    end: float
    cls: str | None  # the module class; None for a function
    instance: str | None  # Class_N, the key of the meta files' qualified names
    parent: "Node | None" = None
    children: list["Node"] = field(default_factory=list)

    def path(self) -> list["Node"]:
        out, node = [], self
        while node is not None:
            out.append(node)
            node = node.parent
        return out[::-1]


@dataclass
class Unit:
    """A kernel (or a CPU operator's self time) with its launch point and what the truth names it."""

    def __post_init__(self):
        self.op = self.op or self.name

    name: str
    gpu_start: float
    dur_us: float
    point: tuple | None  # (thread, time) of the launch
    op: str = ""  # what the code called: the kernel itself, or a CPU operator's outermost operator
    annotated: tuple | None = None  # (group, module) of a `group.module` user annotation around the launch
    node: Node | None = None  # the innermost range around the launch
    step: int = -1
    layer: Node | None = None
    row: str | None = None  # a key of table.ROWS, or OUTSIDE


class _Forest:
    """Every thread's python ranges as a nesting tree, and the innermost range around a point."""

    def __init__(self, events: list[dict]):
        self.by_tid: dict = {}
        for e in events:
            if e.get("ph") != "X" or e.get("cat") != "python_function":
                continue
            m = _INSTANCE.match(e["name"])
            node = Node(e["name"], float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)),
                        m.group("cls") if m else None, f"{m.group('cls')}_{m.group('n')}" if m else None)
            self.by_tid.setdefault(e.get("tid"), []).append(node)
        self.starts = {}
        for tid, nodes in self.by_tid.items():
            nodes.sort(key=lambda n: (n.start, -(n.end - n.start)))
            stack: list[Node] = []
            for n in nodes:
                while stack and stack[-1].end < n.start:
                    stack.pop()
                if stack:
                    n.parent = stack[-1]
                    stack[-1].children.append(n)
                stack.append(n)
            self.starts[tid] = [n.start for n in nodes]

    def innermost(self, point) -> Node | None:
        if point is None or point[0] not in self.by_tid:
            return None
        tid, t = point
        i = bisect.bisect_right(self.starts[tid], t) - 1
        node = self.by_tid[tid][i] if i >= 0 else None
        while node is not None and node.end < t:
            node = node.parent
        return node

    def modules(self, pattern: re.Pattern) -> list[Node]:
        return [n for nodes in self.by_tid.values() for n in nodes if n.cls and pattern.search(n.cls)]


def _units(events: list[dict]) -> list[Unit]:
    launches = {}
    for e in events:
        if e.get("cat") in _LAUNCH_CATS and e.get("ph") == "X":
            corr = (e.get("args") or {}).get("correlation")
            if corr is not None:
                launches[corr] = (e.get("tid"), float(e["ts"]))
    units = []
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in _GPU_CATS:
            corr = (e.get("args") or {}).get("correlation")
            units.append(Unit(e["name"], float(e["ts"]), float(e.get("dur", 0)), launches.get(corr)))
    if units:
        return units
    # a CPU-only trace: operators stand in for kernels, each with its self time (children's time is theirs)
    ops = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"),
                 key=lambda e: (e.get("tid"), float(e["ts"]), -float(e.get("dur", 0))))
    stack: list[list] = []  # [event, self time]
    done: list[list] = []
    for e in ops:
        start, end = float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))
        while stack and (stack[-1][0].get("tid") != e.get("tid") or
                         float(stack[-1][0]["ts"]) + float(stack[-1][0].get("dur", 0)) <= start):
            done.append(stack.pop())
        if stack:
            stack[-1][1] -= end - start
        stack.append([e, end - start])
    done.extend(stack)
    units = [Unit(e["name"], float(e["ts"]), own, (e.get("tid"), float(e["ts"]))) for e, own in done if own > 0]
    # an operator's self time belongs to the call the python code made (aten::matmul's aten::t is the matmul's)
    for u, root in zip(units, _roots(ops, [e for e, own in done if own > 0])):
        u.op = root
    return units


def _roots(ops: list[dict], chosen: list[dict]) -> list[str]:
    """The outermost operator around each chosen operator (same thread)."""
    root_of: dict[int, str] = {}
    stack: list[dict] = []
    for e in ops:
        start = float(e["ts"])
        while stack and (stack[-1].get("tid") != e.get("tid") or
                         float(stack[-1]["ts"]) + float(stack[-1].get("dur", 0)) <= start):
            stack.pop()
        root_of[id(e)] = stack[0]["name"] if stack else e["name"]
        stack.append(e)
    return [root_of[id(e)] for e in chosen]


@dataclass
class Truth:
    """Shares of the steps' busy time per D4 group and row, steps and layers, from the ranges."""

    path: str
    units: list[Unit]
    steps: int
    layers: list[int]  # per step
    moe_layers: list[int]

    @property
    def busy_us(self) -> float:
        return sum(u.dur_us for u in self.units) or 1.0

    def row_shares(self) -> dict[tuple[str, str], float]:
        out: Counter = Counter()
        for u in self.units:
            key = u.annotated if u.annotated and u.row != T.OUTSIDE else (T.OUTSIDE, T.OUTSIDE) if u.row == T.OUTSIDE \
                else ("unnamed", "unnamed") if u.row is None else T.ROWS[u.row]
            out[key] += u.dur_us
        return {k: 100 * v / self.busy_us for k, v in out.items()}

    def group_shares(self) -> dict[str, float]:
        out: Counter = Counter()
        for (group, _module), pct in self.row_shares().items():
            out[group] += pct
        return dict(out)

    @property
    def unnamed_pct(self) -> float:
        """Busy time the truth could not place (a replay's kernels its eager twin does not have)."""
        return 100 * sum(u.dur_us for u in self.units if u.row is None) / self.busy_us


def truth_of(path: str, module_names: dict[str, str] | None = None) -> Truth:
    """The truth of a trace with ranges. `module_names`: Class_N -> qualified name, where recorded."""
    events = read_events(path)
    forest = _Forest(events)
    units = _units(events)
    forwards = _forwards(forest)
    if not forwards:
        raise ValueError(f"{path}: no model forward range (nn.Module: ...ForCausalLM_N); record with with_stack")
    starts = [f.start for f in forwards]
    namer = _Namer(module_names or {})
    tbo = _TboLayers(forest, starts)
    for u in units:
        u.node = forest.innermost(u.point)
        when = u.point[1] if u.point is not None else u.gpu_start
        u.step = max(0, bisect.bisect_right(starts, when) - 1)
        path_ = u.node.path() if u.node else []
        layer_at = next((i for i, n in enumerate(path_) if n.cls and T.LAYER_CLASS.search(n.cls)), None)
        if layer_at is None:
            op_at = next((i for i, n in enumerate(path_) if n.cls is None and T.TBO_OPERATION.search(n.name)), None)
            if op_at is None:
                u.row = T.OUTSIDE
                continue
            u.layer = tbo.micro_layer(u.step, path_[op_at])
            u.row = _tbo_row(u, path_[op_at], path_[op_at + 1:])
            continue
        u.layer = path_[layer_at]
        u.row = namer.row(u, path_[layer_at:])
    _name_expert_gemms(units, namer)
    _apply_annotations(units, events)
    layers, moe = [], []
    for step, f in enumerate(forwards):
        calls = [n for n in _descendants(f) if n.cls and T.LAYER_CLASS.search(n.cls)]
        calls = [n for n in calls if not _has_ancestor(n, T.LAYER_CLASS)]
        tbo_layers = tbo.layers(step)  # MoE layers run as operations: two micro-batches each
        layers.append(len(calls) + tbo_layers)
        moe.append(sum(1 for n in calls if namer.moe_block(n) is not None) + tbo_layers)
    return Truth(path, units, len(forwards), layers, moe)


class _TboLayers:
    """Two-batch overlap: each operation function is called once per micro-batch and MoE layer, in the
    order A(layer 0), B(layer 0), A(layer 1), ... (B runs behind A, never ahead of A's next layer), so
    the k-th call of one operation in a forward is micro-layer k of that forward."""

    def __init__(self, forest: _Forest, forward_starts: list[float]):
        self.calls: dict[tuple[int, str], list[Node]] = {}
        for nodes in forest.by_tid.values():
            for n in nodes:
                m = T.TBO_OPERATION.search(n.name) if n.cls is None else None
                if m:
                    step = max(0, bisect.bisect_right(forward_starts, n.start) - 1)
                    self.calls.setdefault((step, m.group("op")), []).append(n)
        for calls in self.calls.values():
            calls.sort(key=lambda n: n.start)
        self._micro: dict[tuple[int, int], Node] = {}

    def micro_layer(self, step: int, op: Node) -> Node:
        """A stand-in node per (forward, micro-layer): the layer a unit's expert GEMMs are named within."""
        calls = self.calls[(step, T.TBO_OPERATION.search(op.name).group("op"))]
        k = calls.index(op)
        return self._micro.setdefault((step, k), Node(f"tbo micro-layer {k}", op.start, op.end, None, None))

    def layers(self, step: int) -> int:
        return len(self.calls.get((step, "op_prepare"), [])) // 2


def _tbo_row(unit: Unit, op: Node, below: list[Node]) -> str:
    """The row of a kernel an operation function launched: a collective by its kind, a module below it
    where it names one (the attention's projections, norms and core), else the operation's row."""
    name = T.TBO_OPERATION.search(op.name).group("op")
    if T.COLLECTIVE_KERNEL.search(unit.op):
        return next((row for kind, row in T.COLLECTIVE_KIND if kind.search(unit.op)), "all_reduce")
    module = next((n for n in below if n.cls), None)
    if name in ("op_prepare", "op_core"):
        if module is not None and T.ATTENTION_CORE_CLASS.search(module.cls) or _first(below, _NEVER, T.ATTN_CORE_FUNCTION):
            return "attn_core"
        if _first(below, T.ROTARY_CLASS, T.ROTARY_FUNCTION):
            return "rotary_emb"
        if module is not None and T.NORM_CLASS.search(module.cls):
            return "q_a_layernorm"  # q_a's and kv_a's norms: one compared row (table.COMPARED_ROWS)
        if module is not None and T.LINEAR_CLASS.search(module.cls):
            if name == "op_core":
                return "o_proj"
            linears = [c for c in _own_ranges(op) if c.cls and T.LINEAR_CLASS.search(c.cls)]
            names = T.ATTENTION_LINEARS_BEFORE_CORE.get(len(linears), [])
            index = next((i for i, c in enumerate(linears) if c is module), None)
            return T.ATTENTION_ATTRIBUTES.get(names[index], "self_attn") if index is not None and index < len(names) \
                else "self_attn"
        if module is None and T.GEMM_KERNEL.search(unit.op):  # the absorbed MLA bmms
            return "w_kc bmm" if name == "op_prepare" else "w_vc bmm"
        return T.TBO_OPERATION_ROWS[name]
    if name == "op_experts":
        if T.GEMM_KERNEL.search(unit.op):
            return "expert_gemm"
        if _first(below, T.ACT_CLASS) or T.ACT_KERNEL.search(unit.op):
            return "silu"
        return "experts"
    if name in ("op_comm_prepare_attn", "op_comm_prepare_mlp") and not (module is not None and T.NORM_CLASS.search(module.cls)):
        return "residual_add"
    return T.TBO_OPERATION_ROWS[name]


def _apply_annotations(units: list[Unit], events: list[dict]) -> None:
    """A user's `group.module` range (record_function) around a launch names its row outright."""
    spans = []
    for e in events:
        m = T.ANNOTATION.match(e.get("name", "")) if e.get("cat") == "user_annotation" else None
        if m and m.group("group") in T.GROUPS:
            spans.append((e.get("tid"), float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), m.groups()))
    for u in units if spans else []:
        for tid, start, end, row in spans:
            if u.point is not None and u.point[0] == tid and start <= u.point[1] <= end:
                u.annotated = row


def _forwards(forest: _Forest) -> list[Node]:
    models = [n for n in forest.modules(T.MODEL_CLASS) if not _has_ancestor(n, T.MODEL_CLASS)]
    return sorted(models, key=lambda n: n.start)


def _has_ancestor(node: Node, pattern: re.Pattern) -> bool:
    p = node.parent
    while p is not None:
        if p.cls and pattern.search(p.cls):
            return True
        p = p.parent
    return False


def _descendants(node: Node):
    stack = list(node.children)
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children)


_ROLE_FUNCTION = re.compile("|".join(p.pattern for p in (
    T.ROTARY_FUNCTION, T.ATTN_CORE_FUNCTION, T.TOPK_FUNCTION, T.DISPATCH_FUNCTION, T.COMBINE_FUNCTION,
    T.EXPERT_LINEAR_FUNCTION, T.ALL_REDUCE_FUNCTION)))
_NEVER = re.compile(r"(?!)")


def _own_ranges(module: Node) -> list[Node]:
    """A module's own calls, in order: its child modules (through any python functions between),
    and the role-naming functions it runs directly."""
    out, stack = [], list(reversed(module.children))
    while stack:
        n = stack.pop()
        if n.cls or _ROLE_FUNCTION.search(n.name):
            out.append(n)
        if n.cls is None:
            stack.extend(reversed(n.children))
    return sorted(out, key=lambda n: n.start)


def _first(nodes, pattern: re.Pattern, functions: re.Pattern | None = None) -> Node | None:
    for n in nodes:
        if (n.cls and pattern.search(n.cls)) or (functions is not None and n.cls is None and functions.search(n.name)):
            return n
    return None


class _Namer:
    """Names a unit's row from its path below the decoder layer."""

    def __init__(self, module_names: dict[str, str]):
        self.names = module_names
        self._attention_names: dict[int, dict[int, str]] = {}

    def attribute(self, node: Node) -> str | None:
        qualified = self.names.get(node.instance or "")
        return qualified.rsplit(".", 1)[-1] if qualified else None

    def moe_block(self, layer: Node) -> Node | None:
        for child in _own_ranges(layer):
            if child.cls and (T.MOE_BLOCK_CLASS.search(child.cls) or
                              any(d.cls and (T.EXPERTS_CLASS.search(d.cls) or T.ROUTER_CLASS.search(d.cls))
                                  for d in _descendants(child))):
                return child
        return None

    def row(self, unit: Unit, path: list[Node]) -> str:
        layer = path[0]
        # module calls, and the few python functions that name a role; helpers (`_call_impl`, ...) drop out
        below = [n for n in path[1:] if n.cls or _ROLE_FUNCTION.search(n.name)]
        if T.COLLECTIVE_KERNEL.search(unit.op):
            return next((row for kind, row in T.COLLECTIVE_KIND if kind.search(unit.op)), "all_reduce")
        if not below:
            return "residual_add"
        top = below[0]
        if _first(below, _NEVER, T.ALL_REDUCE_FUNCTION):
            return "all_reduce"
        if _first(below, T.ROTARY_CLASS, T.ROTARY_FUNCTION):
            return "rotary_emb"
        attention = _first(_own_ranges(layer), T.ATTENTION_CLASS)
        moe = self.moe_block(layer)
        if top.cls and T.NORM_CLASS.search(top.cls):
            if attention is None or top.start < attention.start:
                return "input_layernorm"
            return "post_attention_layernorm" if moe is not None else "dense_post_attention_layernorm"
        if top is attention:
            return self._attention_row(unit, attention, below[1:])
        if top is moe:
            return self._moe_row(unit, moe, below[1:])
        if top.cls and T.MLP_CLASS.search(top.cls):
            return self._dense_row(top, below[1:])
        return "residual_add" if top.cls is None else "self_attn" if attention and top.end <= attention.end else "residual_add"

    # ------------------------------------------------------------ attention

    def _attention_row(self, unit: Unit, attention: Node, below: list[Node]) -> str:
        core = _first(_own_ranges(attention), T.ATTENTION_CORE_CLASS, T.ATTN_COMPUTE_FUNCTION)
        module = next((n for n in below if n.cls), None)  # a projection or norm wins over the function it runs in
        if module is not None and not T.ATTENTION_CORE_CLASS.search(module.cls):
            name = self._attention_names_of(attention, core).get(id(module))
            return T.ATTENTION_ATTRIBUTES.get(name or "", "self_attn")
        if below:
            return "attn_core" if _first(below, T.ATTENTION_CORE_CLASS, T.ATTN_CORE_FUNCTION) else "self_attn"
        # launched by the attention module itself: the absorbed MLA bmms, or reshapes
        if T.GEMM_KERNEL.search(unit.op):
            return "w_kc bmm" if core is None or unit.point[1] < core.start else "w_vc bmm"
        return "self_attn"

    def _attention_names_of(self, attention: Node, core: Node | None) -> dict[int, str]:
        known = self._attention_names.get(id(attention))
        if known is not None:
            return known
        names: dict[int, str] = {}
        children = [c for c in _own_ranges(attention) if c.cls]
        if all(self.attribute(c) for c in children) and children:
            names = {id(c): self.attribute(c) for c in children}
        else:
            linears = [c for c in children if T.LINEAR_CLASS.search(c.cls)]
            cut = core.start if core is not None else (linears[-1].start if linears else 0)
            before = [c for c in linears if c.start < cut]
            after = [c for c in linears if c.start >= cut]
            for c, n in zip(before, T.ATTENTION_LINEARS_BEFORE_CORE.get(len(before), [])):
                names[id(c)] = n
            for c in after:
                names[id(c)] = "o_proj"
            previous = None
            for c in children:
                if T.NORM_CLASS.search(c.cls) and previous is not None:
                    names[id(c)] = T.NORM_AFTER.get(previous, "")
                if id(c) in names:
                    previous = names[id(c)]
        self._attention_names[id(attention)] = names
        return names

    # ------------------------------------------------------------ MoE block

    def _moe_row(self, unit: Unit, moe: Node, below: list[Node]) -> str:
        if _first(below, T.DISPATCH_CLASS, T.DISPATCH_FUNCTION):
            return "dispatch"
        if _first(below, T.COMBINE_CLASS, T.COMBINE_FUNCTION):
            return "combine"
        if _first(below, T.TOPK_CLASS, T.TOPK_FUNCTION):
            return "topk"
        experts = _first(_own_ranges(moe), T.EXPERTS_CLASS)
        if not below:  # the block's own arithmetic: routing before the experts, the sum after them
            return "topk" if experts is None or unit.point[1] < experts.start else "combine"
        top = below[0]
        attr = self.attribute(top)
        if top is experts or attr == "experts":
            projection = _first(below[1:], _NEVER, T.EXPERT_LINEAR_FUNCTION)
            if projection is not None:
                calls = [n for n in _own_ranges(top) if n.cls is None and T.EXPERT_LINEAR_FUNCTION.search(n.name)]
                return "up_gate_gemm" if calls.index(projection) % 2 == 0 else "down_gemm"
            if T.EXPERTS_TOPK_KERNEL.search(unit.op):
                return "topk"
            if T.EXPERTS_COMBINE_KERNEL.search(unit.op):
                return "combine"
            if T.GEMM_KERNEL.search(unit.op):  # before the activation test: a GEMM may fuse the activation
                return "expert_gemm"
            if _first(below[1:], T.ACT_CLASS) or T.ACT_KERNEL.search(unit.op):
                return "silu"
            return "experts"
        if attr in ("gate", "router") or (top.cls and T.ROUTER_CLASS.search(top.cls)):
            if len(below) > 1 and below[1].cls:  # the router's own linear module
                return "router"
            return "router" if T.GEMM_KERNEL.search(unit.op) else "topk"
        if attr and attr.startswith("shared_expert"):
            return "shared_experts"
        if top.cls and T.MLP_CLASS.search(top.cls):
            return "shared_experts"
        if top.cls and T.LINEAR_CLASS.search(top.cls):  # a bare linear: the router before the experts, a shared gate after
            return "router" if experts is None or top.start < experts.start else "shared_experts"
        return "topk" if experts is None or top.start < experts.start else "combine"

    # ------------------------------------------------------------ dense MLP

    def _dense_row(self, mlp: Node, below: list[Node]) -> str:
        if not below:
            return "act"  # SwiGLU's product, launched by the MLP itself
        top = below[0]
        attr = self.attribute(top)
        if attr in T.DENSE_MLP_ATTRIBUTES:
            return T.DENSE_MLP_ATTRIBUTES[attr]
        if top.cls and T.ACT_CLASS.search(top.cls):
            return "act"
        linears = [c for c in _own_ranges(mlp) if c.cls and T.LINEAR_CLASS.search(c.cls)]
        if top.cls and T.LINEAR_CLASS.search(top.cls):
            return "down_proj" if linears and top is linears[-1] else "gate_up_proj"
        return "act"


def _name_expert_gemms(units: list[Unit], namer: _Namer) -> None:
    """The routed experts' GEMMs: before the nearest activation up_gate, after it down (no range
    tells them apart); without any activation, alternately up_gate and down in launch order."""
    by_layer: dict[int, list[Unit]] = {}
    for u in units:
        if u.row in ("expert_gemm", "silu"):
            by_layer.setdefault(id(u.layer), []).append(u)
    for members in by_layer.values():
        members.sort(key=lambda u: u.point[1])
        acts = [u.point[1] for u in members if u.row == "silu"]
        gemms = [u for u in members if u.row == "expert_gemm"]
        for i, g in enumerate(gemms):
            if not acts:
                g.row = "up_gate_gemm" if i % 2 == 0 else "down_gemm"
                continue
            j = bisect.bisect_left(acts, g.point[1])
            after = acts[j] - g.point[1] if j < len(acts) else float("inf")
            before = g.point[1] - acts[j - 1] if j > 0 else float("inf")
            g.row = "up_gate_gemm" if after < before else "down_gemm"


# ---------------------------------------------------------------- CUDA-graph replays


def transfer(eager: Truth, replay_path: str) -> Truth:
    """A replay's truth: its kernels named as its eager twin's, aligned by name in order, step by step.

    Steps repeat the same kernels, so one alignment over the whole trace anchors on any one step and
    leaves the rest unmatched; each replay step (its `step[...]` range around the graph launch) is
    aligned with the eager step it matches best."""
    events = read_events(replay_path)
    units = sorted(_units(events), key=lambda u: u.gpu_start)
    replay_steps = _replay_steps(events, units)
    eager_steps: dict[int, list[Unit]] = {}
    for u in sorted(eager.units, key=lambda u: u.gpu_start):
        eager_steps.setdefault(u.step, []).append(u)
    candidates = list(eager_steps.values()) if len(replay_steps) > 1 else [sorted(eager.units, key=lambda u: u.gpu_start)]
    for members in replay_steps:
        names = [u.name for u in members]
        best = None
        for named in candidates:
            matcher = difflib.SequenceMatcher(None, [u.name for u in named], names, autojunk=False)
            blocks = matcher.get_matching_blocks()
            size = sum(b.size for b in blocks)
            if best is None or size > best[0]:
                best = (size, named, blocks)
        _size, named, blocks = best
        taken = set()
        for block in blocks:
            for k in range(block.size):
                src, dst = named[block.a + k], members[block.b + k]
                dst.row, dst.step, dst.layer = src.row, src.step, src.layer
                taken.add(id(src))
        _name_the_reordered(members, [u for u in named if id(u) not in taken])
    return Truth(replay_path, units, eager.steps, eager.layers, eager.moe_layers)


def _name_the_reordered(members: list[Unit], spare: list[Unit]) -> None:
    """Replay kernels the in-order alignment left out: a graph replay runs some branches on other
    streams (the shared expert beside the dispatch), so some kernels come in another order. The k-th
    such kernel of a name takes the row of the k-th eager kernel of that name no other took (layers
    run in order in both); a collective the eager run has under another name (graph mode's own
    all-reduce) is named by what it does; what is still left before the step's first layer kernel or
    after its last is outside the layers (the replay's input copies, sampling)."""
    by_name: dict[str, list[Unit]] = {}
    for u in spare:
        by_name.setdefault(u.name, []).append(u)
    for u in members:
        twins = by_name.get(u.name) if u.row is None else None
        if twins:
            src = twins.pop(0)
            u.row, u.step, u.layer = src.row, src.step, src.layer
    in_layer = [i for i, u in enumerate(members) if u.layer is not None]
    if not in_layer:
        return
    first, last = in_layer[0], in_layer[-1]
    for i, u in enumerate(members):
        if u.row is not None:
            continue
        if T.COLLECTIVE_KERNEL.search(u.op) and first < i < last:
            u.row = next((row for kind, row in T.COLLECTIVE_KIND if kind.search(u.op)), "all_reduce")
        elif i < first or i > last:
            u.row = T.OUTSIDE


def _replay_steps(events: list[dict], units: list[Unit]) -> list[list[Unit]]:
    """The replay's units per step: the CPU `step[...]` range (SGLang's profiler labels each forward)
    around each unit's launch, or SGLang 0.5.17's `draft_extend` range (its graph-mode draft extend has
    no `step[...]` of its own; in eager mode one sits inside it: the outermost range is the step);
    without such ranges, the whole trace as one."""
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), e.get("tid"))
                   for e in events if e.get("cat") == "user_annotation" and e.get("ph") == "X"
                   and (str(e.get("name", "")).startswith("step[") or e.get("name") == "draft_extend"))
    outermost: list[tuple] = []
    for span in spans:  # by start: a span inside the last kept one is part of it
        if outermost and span[1] <= outermost[-1][1]:
            continue
        outermost.append(span)
    spans = outermost
    if len(spans) < 2:
        return [units]
    steps: list[list[Unit]] = [[] for _ in spans]
    starts = [start for start, _end, _tid in spans]
    rest = []
    for u in units:
        i = bisect.bisect_right(starts, u.point[1]) - 1 if u.point is not None else -1
        if i >= 0 and u.point[1] <= spans[i][1]:
            steps[i].append(u)
        else:
            rest.append(u)
    for u in rest:  # launched outside every forward's step range: not in a layer
        u.row = T.OUTSIDE
    steps = [s for s in steps if s]
    return steps if steps else [units]


def compare(truth_groups: dict[str, float], truth_rows: dict[tuple[str, str], float],
            found_groups: dict[str, float], found_rows: dict[tuple[str, str], float],
            rows: list[str] | None = None) -> list[str]:
    """What is off, one line each: every group beyond 3 points, every compared row beyond
    max(1 point, 20% of the row). An empty list: the tool agrees with the truth."""
    problems = []
    for g in T.GROUPS:
        gap = found_groups.get(g, 0.0) - truth_groups.get(g, 0.0)
        if abs(gap) > T.MAX_GROUP_GAP_PP:
            problems.append(f"group {g}: truth {truth_groups.get(g, 0.0):.2f}% found {found_groups.get(g, 0.0):.2f}%")
    groups_of: dict[str, set] = {}
    for group, module in T.ROWS.values():
        groups_of.setdefault(module, set()).add(group)
    for (group, module), pct in sorted(found_rows.items()):
        if group in groups_of.get(module, {group}) or pct < T.MIN_MISFILED_PCT:
            continue
        problems.append(f"row {module} filed under {group}: {pct:.2f}% (the D4 table has it under "
                        f"{' / '.join(sorted(groups_of[module]))})")
    for name in rows if rows is not None else T.COMPARED_ROWS:
        keys = T.COMPARED_ROWS[name]
        want = sum(truth_rows.get(k, 0.0) for k in keys)
        got = sum(found_rows.get(k, 0.0) for k in keys)
        if abs(got - want) > max(T.MAX_ROW_GAP_PP, T.MAX_ROW_GAP_SHARE * want):
            problems.append(f"row {name}: truth {want:.2f}% found {got:.2f}%")
    return problems
