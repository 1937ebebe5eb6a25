"""Roles from the trace's own ranges: nn.Module calls, a few python functions, `group.module` annotations.

Why: an eager trace (and a graph-capture trace) says which module launched each kernel; that is
the ground truth the structural attribution is measured against, and the best attribution when
it is there. The profiler names calls by class (`nn.Module: Linear_12`), not attribute
(`q_b_proj`), so roles come from class names and position (module_map.yaml): the decoder layer's
first norm is input_layernorm, the attention module's linear layers before its core are the
projections (named as the structural attribution names them), its last is o_proj, a MoE block's
router / experts / shared experts by class. Kernels a module launches directly are named by
their kernel class. User annotations named `group.module` (a `record_function` range, or a
`gpu_user_annotation`) name their kernels outright.
"""
from __future__ import annotations

import bisect
import functools
import re
from dataclasses import dataclass, field


from analysis.ingest.kernel_classes import GEMM_LIKE, collective_role, kernel_class, kernel_class_rule
from analysis.attribution.module_attribution import kernel_label, module_class
from analysis.attribution.roles import is_moe_role, row_of
from analysis.attribution.named_rules import MODULE_RULES, rule as named_rule
from analysis.attribution.layer_vocabulary import (
    ABSORBED_MLA,
    attention_form,
    inner_norm_roles,
    projection_roles,
    routed_roles,
)
from analysis.ingest.range_tree import RangeTree
from analysis.rules import load_rules, rules_path
from analysis.rules_schema import ModuleMapRules
from analysis.attribution.rows import SECTION_LAYER, SECTION_POST, SECTION_PRE, SOURCE_ANNOTATION, SOURCE_MODULE_RANGE
from analysis.ingest.trace_model import Kernel, Launch, Range

MAP_FILE = rules_path("module_map.yaml")
_ANNOTATED = re.compile(r"^(?P<group>[a-z][\w /]*)\.(?P<module>[\w. /-]+)$")
D4_GROUPS = ("attention", "gate", "moe", "combine/share overlap", "mlp", "communication", "other", "mtp")


@dataclass(frozen=True)
class ModuleMap:
    model: re.Pattern[str]
    layer: re.Pattern[str]
    attention: re.Pattern[str]
    norm: re.Pattern[str]
    linear: re.Pattern[str]
    rotary: re.Pattern[str]
    activation: re.Pattern[str]
    experts: re.Pattern[str]
    router: re.Pattern[str]
    shared: re.Pattern[str]
    dispatch: re.Pattern[str]
    combine: re.Pattern[str]
    functions: tuple[tuple[re.Pattern[str], str], ...]
    core_functions: re.Pattern[str] | None = None  # functions that are the attention computation


@functools.lru_cache(maxsize=1)
def standard_map() -> ModuleMap:
    rules = load_rules(MAP_FILE.name, ModuleMapRules)
    keys = ("model", "layer", "attention", "norm", "linear", "rotary", "activation", "experts", "router", "shared",
            "dispatch", "combine")
    patterns = {k: re.compile(getattr(rules, k)) for k in keys}
    functions = tuple((re.compile(f.match), f.role) for f in rules.functions)
    core = [f.match for f in rules.functions if f.core]
    patterns["core_functions"] = re.compile("|".join(f"(?:{c})" for c in core)) if core else None
    for _pattern, role in functions:
        row_of(role)  # an unknown role fails here, naming the file
    return ModuleMap(functions=functions, **patterns)


# ---------------------------------------------------------------- the range tree of one thread


@dataclass
class _Node:
    rng: Range
    cls: str
    parent: int
    children: list[int] = field(default_factory=list)
    function_role: str | None = None  # python-function ranges name a role directly


class RangeForest:
    """Module and function ranges per thread as trees: who encloses a point, and each call's children."""

    def __init__(self, module_ranges: list[Range], function_ranges: list[Range], spec: ModuleMap):
        self.nodes: list[_Node] = []
        roles: list[str | None] = [None] * len(module_ranges)
        ranges = list(module_ranges)
        for r in function_ranges:
            role = next((role for pattern, role in spec.functions if pattern.search(r.name)), None)
            if role is not None:
                ranges.append(r)
                roles.append(role)
        self.tree = RangeTree(ranges)
        for node, (r, parent) in enumerate(zip(self.tree.ranges, self.tree.parent)):
            role = roles[self.tree.source[node]]
            self.nodes.append(_Node(r, module_class(r.name) if role is None else r.name, parent, function_role=role))
            if role is None:  # a module's children are the nearest modules inside it, functions are transparent
                owner = parent
                while owner >= 0 and self.nodes[owner].function_role is not None:
                    owner = self.nodes[owner].parent
                if owner >= 0:
                    self.nodes[owner].children.append(node)

    def __bool__(self) -> bool:
        return bool(self.nodes)

    def innermost(self, tid: int, t: float) -> int:
        """The innermost range that holds time t on thread tid, or -1."""
        return self.tree.innermost(tid, t)

    def path(self, node: int) -> list[int]:
        """node and its ancestors, innermost first."""
        return self.tree.ancestors(node)

    def roots(self) -> list[int]:
        return [i for i, n in enumerate(self.nodes) if n.parent < 0 and n.function_role is None]


# ---------------------------------------------------------------- naming


@dataclass
class _Context:
    """Where one kernel was launched: its layer call and the layer's child it came through."""

    layer: int = -1
    top: int = -1  # the layer's direct child on the kernel's path (-1: launched by the layer itself)
    path: tuple[int, ...] = ()
    function_role: str | None = None
    in_core_function: bool = False
    function: int = -1  # the innermost function range that names the kernel (-1: none)


class ModuleRoleNamer:
    """Roles for the kernels of one step from one rank's range forest."""

    def __init__(self, forest: RangeForest, spec: ModuleMap | None = None):
        self.forest = forest
        self.spec = spec or standard_map()
        self._kind: dict[int, str] = {}
        self._child_roles: dict[int, dict[int, str]] = {}
        self._moe_block: dict[int, bool] = {}
        self._paths: dict[tuple[str, ...], str] = {}  # module classes -> their module_path (one string each)

    # -- classification of module calls
    def names_layers(self) -> bool:
        """Does any module range of the rank match the map's decoder layer? Without one, no kernel
        can be placed in a layer by ranges (every context's layer is -1), so the rank skips them."""
        return any(n.function_role is None and self.spec.layer.search(n.cls) for n in self.forest.nodes)

    def kind(self, node: int) -> str:
        """attention | norm | moe | mlp | other for a direct child of a decoder layer."""
        hit = self._kind.get(node)
        if hit is None:
            cls = self.forest.nodes[node].cls
            spec = self.spec
            if self.forest.nodes[node].function_role is not None:
                hit = "function"
            elif spec.attention.search(cls):
                hit = "attention"
            elif spec.norm.search(cls):
                hit = "norm"
            elif self._holds_experts(node):
                hit = "moe"
            elif spec.linear.search(cls) and not self.forest.nodes[node].children:
                hit = "linear"
            else:
                hit = "mlp"
            self._kind[node] = hit
        return hit

    def _holds_experts(self, node: int) -> bool:
        hit = self._moe_block.get(node)
        if hit is None:
            spec = self.spec
            hit = False
            todo = list(self.forest.nodes[node].children)
            while todo and not hit:
                child = self.forest.nodes[todo.pop()]
                hit = child.function_role is None and bool(spec.experts.search(child.cls) or spec.router.search(child.cls))
                todo.extend(child.children)
            self._moe_block[node] = hit
        return hit

    def context(self, node: int) -> _Context:
        path = self.forest.path(node)
        nodes = self.forest.nodes
        # a function names the kernel only when no module call lies inside it on the path
        inner_functions = []
        for n in path:
            if nodes[n].function_role is None:
                break
            inner_functions.append(n)
        function_role = nodes[inner_functions[0]].function_role if inner_functions else None
        function = inner_functions[0] if inner_functions else -1
        core = self.spec.core_functions
        in_core = core is not None and any(core.search(nodes[n].cls) for n in inner_functions)
        modules = [n for n in path if nodes[n].function_role is None]
        for depth, n in enumerate(modules):
            if self.spec.layer.search(nodes[n].cls):
                top = modules[depth - 1] if depth > 0 else -1
                return _Context(n, top, tuple(modules[:depth]), function_role, in_core, function)
        return _Context(path=tuple(modules), function_role=function_role, in_core_function=in_core, function=function)

    def module_path(self, ctx: _Context) -> str:
        """KernelRow.module_path of a launch: the module classes from its decoder layer (or the
        outermost module) down, then the function that names it, " > " between them."""
        nodes = self.forest.nodes
        names = [nodes[ctx.layer].cls] if ctx.layer >= 0 else []
        names += [nodes[n].cls for n in reversed(ctx.path)]
        if ctx.function >= 0:
            names.append(nodes[ctx.function].cls)
        key = tuple(names)
        joined = self._paths.get(key)
        if joined is None:
            joined = self._paths[key] = " > ".join(names)
        return joined

    # -- roles of a layer's children
    def layer_child_roles(self, layer: int) -> dict[int, str]:
        """Roles of the layer's norm children (input / post-attention) by their place around attention."""
        cached = self._child_roles.get(layer)
        if cached is not None:
            return cached
        children = [c for c in self.forest.nodes[layer].children if self.forest.nodes[c].function_role is None]
        attention = next((c for c in children if self.kind(c) == "attention"), None)
        attention_start = self.forest.nodes[attention].rng.start_us if attention is not None else float("inf")
        ffn_start = min((self.forest.nodes[c].rng.start_us for c in children if self.kind(c) in ("moe", "mlp")),
                        default=float("inf"))
        roles = {}
        for c in children:
            if self.kind(c) != "norm":
                continue
            start = self.forest.nodes[c].rng.start_us
            roles[c] = ("input_layernorm" if start < attention_start
                        else "post_attention_layernorm" if start < ffn_start else "layer_other")
        self._child_roles[layer] = roles
        return roles

    def attention_child_roles(self, attention: int, core_time: float | None) -> dict[int, str]:
        """Projection names for the attention module's children (linear layers and norms)."""
        cached = self._child_roles.get(attention)
        if cached is not None:
            return cached
        nodes = self.forest.nodes
        spec = self.spec
        children = [c for c in nodes[attention].children if nodes[c].function_role is None]
        core_child = next((c for c in children if spec.attention.search(nodes[c].cls)), None)
        if core_child is not None:
            core_time = nodes[core_child].rng.start_us
        if core_time is None:
            core_time = float("inf")
        linears = [c for c in children if spec.linear.search(nodes[c].cls) and not spec.attention.search(nodes[c].cls)]
        pre = [c for c in linears if nodes[c].rng.start_us < core_time]
        post = [c for c in linears if nodes[c].rng.start_us >= core_time]
        norms = [c for c in children if spec.norm.search(nodes[c].cls)]
        pre_starts = [nodes[c].rng.start_us for c in pre]
        inner_runs: list[list[int]] = []
        tail_norms = []
        for c in norms:
            t = nodes[c].rng.start_us
            between = bisect.bisect_left(pre_starts, t)
            if 0 < between < len(pre):
                if inner_runs and inner_runs[-1][0] == between:
                    inner_runs[-1].append(c)
                else:
                    inner_runs.append([between, c])
            else:
                tail_norms.append((c, between))
        rotary_before_last = len(pre) >= 2 and any(
            spec.rotary.search(nodes[c].cls) and pre_starts[-2] < nodes[c].rng.start_us < pre_starts[-1] for c in children)
        form = attention_form(len(inner_runs), len(pre), rotary_before_last)
        absorbed = form == ABSORBED_MLA
        roles: dict[int, str] = {}
        for c, role in zip(pre, projection_roles(form, len(pre), inner_runs[0][0] if inner_runs else 0)):
            roles[c] = role
        inner_names = inner_norm_roles(form, len(inner_runs))
        for run, role in zip(inner_runs, inner_names):
            for c in run[1:]:
                roles[c] = role
        for c, between in tail_norms:
            roles[c] = "input_layernorm" if between == 0 else "qk_norm"
        for c in post:
            roles[c] = "o_proj" if c == post[-1] else ("w_vc_bmm" if absorbed else "o_proj")
        for c in children:
            if c == core_child:
                roles[c] = "attn_core"
            elif spec.rotary.search(nodes[c].cls):
                roles[c] = "rotary_emb"
        roles[-1] = "absorbed" if absorbed else ""  # remembered for the module's direct GEMMs
        self._child_roles[attention] = roles
        return roles


def roles_from_ranges(kernels: list[Kernel], points: list[tuple[int, float] | None],
                      namer: ModuleRoleNamer) -> tuple[list[int], list[str | None], list[str], list[str]]:
    """Per kernel: its decoder-layer call (-1 outside layers), its role, the rule that decided
    (KernelRow.rule: the module map's key whose match placed it, or the kernel class), and the module
    path around its launch (KernelRow.module_path), from the ranges around its launch."""
    forest = namer.forest
    nodes = forest.nodes
    spec = namer.spec
    contexts = []
    for point in points:
        node = forest.innermost(*point) if point is not None else -1
        contexts.append(namer.context(node) if node >= 0 else _Context())
    classes = [kernel_class(k) for k in kernels]
    # attention calls: where the core starts and which direct kernels are GEMMs
    core_time: dict[int, float] = {}  # on the CPU clock, like the module ranges
    for point, ctx, cls in zip(points, contexts, classes):
        if point is not None and ctx.top >= 0 and namer.kind(ctx.top) == "attention":
            is_core = ctx.in_core_function or cls == "attn_core" or (
                len(ctx.path) >= 2 and spec.attention.search(nodes[ctx.path[-2]].cls))
            if is_core:
                core_time[ctx.top] = min(core_time.get(ctx.top, point[1]), point[1])
    roles: list[str | None] = [None] * len(kernels)
    rules: list[str] = [f"{MAP_FILE.name}:layer"] * len(kernels)  # outside a layer: no layer range holds it
    by_container: dict[int, list[int]] = {}
    for i, (k, ctx, cls, point) in enumerate(zip(kernels, contexts, classes, points)):
        if ctx.layer < 0:
            continue
        if cls == "allreduce":
            roles[i] = "all_reduce"
            rules[i] = kernel_class_rule(k)
            continue
        if ctx.top < 0:
            roles[i] = "residual_add"
            continue
        kind = namer.kind(ctx.top)
        rules[i] = f"{MAP_FILE.name}:{_MAP_KEY_OF_KIND.get(kind, 'layer')}"
        if kind == "function":
            roles[i] = ctx.function_role
        elif kind == "norm":
            roles[i] = namer.layer_child_roles(ctx.layer).get(ctx.top, "layer_other")
        elif kind == "attention":
            roles[i] = _attention_role(namer, ctx, cls, point, core_time.get(ctx.top))
        elif kind == "moe":
            roles[i], rules[i] = _moe_role(namer, ctx, cls, k)
            if roles[i] is None:
                by_container.setdefault(ctx.path[-2], []).append(i)
        else:  # a dense MLP (or a module the map does not know): by its linear layers
            roles[i], rules[i] = _mlp_role(namer, ctx, cls)
        if ctx.function_role is not None and roles[i] == ctx.function_role:
            rules[i] = f"{MAP_FILE.name}:functions"
    for members in by_container.values():
        _name_routed(members, kernels, classes, roles)
    return [ctx.layer for ctx in contexts], roles, rules, [namer.module_path(ctx) for ctx in contexts]


# KernelRow.rule of a kernel named by module ranges: the module map's key whose regex matched the
# module that decided (module_map.yaml); where none did, a rule of module_rules.yaml names the decision
_MAP_KEY_OF_KIND = {"attention": "attention", "norm": "norm", "moe": "experts", "mlp": "linear",
                    "function": "functions"}
_MAP = {key: f"{MAP_FILE.name}:{key}" for key in ("experts", "dispatch", "combine", "router", "shared", "linear")}
_OWN = {name: named_rule(MODULE_RULES, name) for name in (
    "moe_block.own_gemm", "moe_block.own_kernel", "moe_block.linear_before_experts", "moe_block.other_linear",
    "moe_block.other_child", "mlp.own_gemm", "mlp.own_kernel")}


def _attention_role(namer: ModuleRoleNamer, ctx: _Context, cls: str, point: tuple[int, float],
                    core_time: float | None) -> str:
    nodes = namer.forest.nodes
    children = namer.attention_child_roles(ctx.top, core_time)
    if ctx.function_role is not None:
        return ctx.function_role
    # the attention module's child on the path (-1: launched by the attention module itself)
    child = ctx.path[-2] if len(ctx.path) >= 2 else -1
    if child >= 0:
        role = children.get(child)
        if role is not None:
            return role
        if namer.spec.activation.search(nodes[child].cls):
            return "self_attn"
    if cls in ("attn_core", "attn_aux", "kv_write"):
        return "attn_core"
    if cls == "rotary":
        return "rotary_emb"
    if cls in GEMM_LIKE and children.get(-1) == "absorbed":
        before = core_time is None or point[1] < core_time
        return "w_kc_bmm" if before else "w_vc_bmm"
    return "self_attn"


def _moe_role(namer: ModuleRoleNamer, ctx: _Context, cls: str, kernel: Kernel) -> tuple[str | None, str]:
    """(role, rule) of a kernel in a MoE block; role None: a routed-expert kernel, named later from
    its place among its call's GEMMs (its rule the experts key)."""
    nodes = namer.forest.nodes
    spec = namer.spec
    inside = ctx.path[:-1]  # the MoE block's descendants on the path, innermost first
    if not inside:  # launched by the block itself: routing before the experts, their sum after
        if cls in ("topk", "softmax", "router_gemm"):
            return "topk", kernel_class_rule(kernel)
        return ("router", _OWN["moe_block.own_gemm"]) if cls in GEMM_LIKE else ("combine", _OWN["moe_block.own_kernel"])
    child = inside[-1]
    child_cls = nodes[child].cls
    if spec.experts.search(child_cls):
        if cls in ("topk", "softmax", "router_gemm"):  # routing inside the experts module: by its class
            return ("topk" if cls != "router_gemm" else "router"), kernel_class_rule(kernel)
        return None, _MAP["experts"]
    if spec.dispatch.search(child_cls):
        return "dispatch", _MAP["dispatch"]
    if spec.combine.search(child_cls):
        return "combine", _MAP["combine"]
    role = "router" if cls in GEMM_LIKE else "topk"
    if spec.router.search(child_cls):
        return role, _MAP["router"]
    if spec.linear.search(child_cls) and _before_experts(namer, child):
        return role, _OWN["moe_block.linear_before_experts"]
    if spec.shared.search(child_cls):
        return "shared_experts", _MAP["shared"]
    if spec.linear.search(child_cls):
        return "shared_experts", _OWN["moe_block.other_linear"]
    return "experts", _OWN["moe_block.other_child"]


def _before_experts(namer: ModuleRoleNamer, child: int) -> bool:
    nodes = namer.forest.nodes
    block = nodes[child].parent
    experts = [c for c in nodes[block].children if namer.spec.experts.search(nodes[c].cls)]
    return bool(experts) and nodes[child].rng.start_us < nodes[experts[0]].rng.start_us


def _mlp_role(namer: ModuleRoleNamer, ctx: _Context, cls: str) -> tuple[str, str]:
    """(role, rule) of a kernel in a layer's MLP (a child that is neither attention, norm nor MoE):
    by its linear children in order, the last the down projection."""
    nodes = namer.forest.nodes
    spec = namer.spec
    mlp = ctx.top
    child = ctx.path[-2] if len(ctx.path) >= 2 else -1
    if child >= 0 and spec.linear.search(nodes[child].cls):
        linears = [c for c in nodes[mlp].children if spec.linear.search(nodes[c].cls)]
        return ("down_proj" if linears and child == linears[-1] else "gate_up_proj"), _MAP["linear"]
    if cls in GEMM_LIKE:
        return "gate_up_proj", _OWN["mlp.own_gemm"]
    return "mlp_act", _OWN["mlp.own_kernel"]


def _name_routed(members: list[int], kernels: list[Kernel], classes: list[str], roles: list[str | None]) -> None:
    """Routed-expert kernels of one experts call, named like the structural attribution names
    them (layer_vocabulary.routed_roles). A GEMM call is a GEMM kernel with its split-K reduction, or on
    the CPU every operator of one aten call."""
    calls: list[int | None] = []
    count = 0
    previous = None
    for i in members:
        cls = classes[i]
        same_cpu_call = (previous is not None and kernels[i].launcher == "cpu"
                         and kernels[i].correlation == kernels[previous].correlation)
        if cls in GEMM_LIKE and not (same_cpu_call and calls and calls[-1] is not None):
            count += 1
            calls.append(count)
        elif (cls == "gemm_aux" or same_cpu_call) and calls and calls[-1] is not None:
            calls.append(calls[-1])
        else:
            calls.append(None)
        previous = i
    for i, role in zip(members, routed_roles([classes[i] for i in members], calls)):
        roles[i] = role


@dataclass(frozen=True)
class Annotations:
    """A rank's `group.module` annotations, parsed once: (range, (group, module)) pairs."""

    cpu: list[tuple[Range, tuple[str, str]]]
    gpu: list[tuple[Range, tuple[str, str]]]


def parse_annotations(cpu_annotations: list[Range], gpu_annotations: list[Range]) -> Annotations | None:
    """The annotations named like a D4 row; None when there are none (the common case)."""
    cpu = [(r, m) for r in cpu_annotations if (m := _annotation_row(r.name))]
    gpu = [(r, m) for r in gpu_annotations if (m := _annotation_row(r.name))]
    return Annotations(cpu, gpu) if cpu or gpu else None


def annotated_rows(kernels: list[Kernel], points: list[tuple[int, float] | None],
                   annotations: Annotations) -> list[tuple[str, str] | None]:
    """Per kernel, its annotation's row: a CPU range around the launch, or a GPU range around the kernel."""
    out: list[tuple[str, str] | None] = []
    for k, point in zip(kernels, points):
        row = None
        for r, m in annotations.gpu:
            if r.start_us <= k.start_us <= r.end_us:
                row = m
        if row is None and point is not None:
            for r, m in annotations.cpu:
                if r.tid == point[0] and r.start_us <= point[1] <= r.end_us:
                    row = m
        out.append(row)
    return out


def _annotation_row(name: str) -> tuple[str, str] | None:
    match = _ANNOTATED.match(name)
    if not match or match.group("group") not in D4_GROUPS:
        return None
    return match.group("group"), match.group("module")


def launch_points(kernels: list[Kernel], launches: dict[int, Launch]) -> list[tuple[int, float] | None]:
    """Where on the CPU each kernel was launched: (thread, time); a CPU operator is its own launch."""
    points: list[tuple[int, float] | None] = []
    for k in kernels:
        if k.launcher == "cpu":
            points.append((k.stream, k.start_us))
        else:
            launch = launches.get(k.correlation)
            points.append((launch.tid, launch.start_us) if launch is not None else None)
    return points


def slots_from_roles(kernels: list[Kernel], layers: list[int], roles: list[str | None], rules: list[str],
                     paths: list[str], source: str = SOURCE_MODULE_RANGE):
    """Slots (analysis.attribution.layers.Slot) and the MoE layer count from per-kernel layer calls and roles;
    (None, 0) when no kernel is in a layer."""
    from analysis.attribution.layers import Slot

    first_start: dict[int, float] = {}  # per layer call, its first kernel's start
    for k, layer in zip(kernels, layers):
        if layer >= 0 and k.start_us < first_start.get(layer, float("inf")):
            first_start[layer] = k.start_us
    if not first_start:
        return None, 0
    unit = {call: u for u, call in enumerate(sorted(first_start, key=first_start.__getitem__))}
    moe_calls = {layer for layer, role in zip(layers, roles) if layer >= 0 and role and is_moe_role(role)}
    first_layer_start = min(first_start.values())
    slots = []
    for k, layer, role, rule, path in zip(kernels, layers, roles, rules, paths):
        label = kernel_label(k)
        if layer >= 0:
            role = role or "layer_other"
            if role == "all_reduce":  # which collective: from its name
                role = collective_role(k.name)
            r = row_of(role, layer in moe_calls)
            slots.append(Slot(SECTION_LAYER, unit[layer], r.group, r.module, label, source, role, rule, path))
        else:
            section = SECTION_PRE if k.start_us < first_layer_start else SECTION_POST
            role = "embedding" if section == SECTION_PRE else "lm_head"
            r = row_of(role)
            slots.append(Slot(section, -1, r.group, r.module, label, source, role, rule, path))
    return slots, len(moe_calls)


def apply_annotations(slots: list, rows: list[tuple[str, str] | None] | None) -> None:
    """`group.module` annotations override whatever named the kernel (they are the user's word)."""
    if rows is None:
        return
    from analysis.attribution.layers import Slot

    for i, (slot, row) in enumerate(zip(slots, rows)):
        if row is not None:  # a new slot: a namer's slots may be shared by steps (structure._layer_plan)
            slots[i] = Slot(slot.section, slot.unit, row[0], row[1], slot.kernel, SOURCE_ANNOTATION,
                            f"{row[0]}.{row[1]}", "annotation")

