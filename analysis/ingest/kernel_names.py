"""Library family and a readable short name for a GPU kernel's full (demangled or mangled) name.

Why: profiler names are C++ signatures hundreds of characters long; a report needs
"vectorized_elementwise_kernel (FillFunctor<long>)" and "ATen", and an appendix that maps the
short name back to the full signature. Families are data (kernel_families.yaml); this module
only parses names.
"""
from __future__ import annotations

import functools
import re

import msgspec

from analysis.errors import AnalysisError
from analysis.rules import load_rules_file, rules_path
from analysis.rules_schema import KernelFamilies

FAMILIES_FILE = rules_path("kernel_families.yaml")
OTHER_FAMILY = "other"
MAX_READABLE_CHARS = 80

_OPEN = {"<": ">", "(": ")", "[": "]", "{": "}"}
_CLOSE = {v: k for k, v in _OPEN.items()}


class KernelFamiliesError(AnalysisError):
    def __init__(self, source: str, problem: str):
        super().__init__(f"kernel families {source}: {problem}")


class _Families(msgspec.Struct, frozen=True):
    rules: list[tuple[str, re.Pattern, bool]]  # family, pattern, whole_name_only
    wrappers: frozenset[str]


@functools.lru_cache(maxsize=4)
def _load(path: str = str(FAMILIES_FILE)) -> _Families:
    try:
        raw = load_rules_file(path, KernelFamilies)
    except AnalysisError as exc:  # the rules loader names the file and the key
        raise KernelFamiliesError(path, str(exc).removeprefix(f"rules {path}: ")) from None
    rules = [(f.family, re.compile(f.match), f.whole_name_only) for f in raw.families]
    return _Families(rules=rules, wrappers=frozenset(raw.wrappers))


# ---- unwrapping mangled names ------------------------------------------------------------------

_MANGLED_NESTED = re.compile(r"^_Z(?:N|L)?")


def unmangle_prefix(name: str) -> str:
    """`_ZN5aiter24add_rmsnorm_quant_kernelI...` -> `aiter::add_rmsnorm_quant_kernel` (names only).

    Enough to recognise the function; template arguments and parameters are dropped. Names that
    are not Itanium-mangled come back unchanged.
    """
    if not name.startswith("_Z"):
        return name
    pos = 3 if name.startswith("_ZN") else 2
    parts: list[str] = []
    while pos < len(name) and name[pos].isdigit():
        end = pos
        while end < len(name) and name[end].isdigit():
            end += 1
        length = int(name[pos:end])
        ident = name[end:end + length]
        if len(ident) < length:
            break
        parts.append("anon" if ident.startswith("_GLOBAL__N") else ident)
        pos = end + length
        if pos < len(name) and name[pos] == "L":  # internal linkage marker
            pos += 1
    return "::".join(parts) if parts else name


# ---- families ----------------------------------------------------------------------------------

def kernel_family(name: str, families_file: str | None = None) -> str:
    """Library family; rules see the kernel's own qualified name first, then the whole name."""
    fam = _load(families_file or str(FAMILIES_FILE))
    text = unmangle_prefix(name.strip())
    own = qualified_name(text, fam.wrappers)
    for family, pattern, whole_only in fam.rules:
        if not whole_only and pattern.search(own):
            return family
    for family, pattern, _ in fam.rules:
        if pattern.search(text):
            return family
    return OTHER_FAMILY


def qualified_name(name: str, wrappers: frozenset[str] = frozenset()) -> str:
    """`void cutlass::device_kernel<flash::FlashAttnFwdSm90<...>>(...)` -> `flash::FlashAttnFwdSm90`."""
    return _unwrapped(name, wrappers)[0]


def _unwrapped(name: str, wrappers: frozenset[str]) -> tuple[str, str]:
    """(qualified name, template arguments) with up to four wrappers (cutlass::device_kernel<Real>...) taken off."""
    qual, args = split_signature(name)
    for _ in range(4):
        if qual.split("::")[-1] not in wrappers or not args:
            break
        qual, args = split_signature(_split_top(args, ",")[0].strip())
    return qual, args


# ---- readable names ----------------------------------------------------------------------------

_NORMALISE = [
    (re.compile(r"\(anonymous namespace\)"), "anon"),
    (re.compile(r"<unnamed>"), "anon"),
    (re.compile(r"\(instance \d+\)"), ""),
]


def _split_top(text: str, seps: str) -> list[str]:
    """Split at separators that are outside any bracket."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth = max(0, depth - 1)
        elif ch in seps and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return out


def _head(text: str) -> str:
    """The text before the first top-level '(' (drops the parameter list)."""
    depth = 0
    for i, ch in enumerate(text):
        if ch == "(" and depth == 0:
            return text[:i]
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth = max(0, depth - 1)
    return text


def split_signature(name: str) -> tuple[str, str]:
    """(qualified function name, its template-argument text) of a demangled signature.

    Drops the return type ("void", "std::enable_if<...>::type"), the parameter list and the
    outer template brackets.
    """
    text = name.strip()
    for pattern, repl in _NORMALISE:
        text = pattern.sub(repl, text)
    words = [w for w in _split_top(_head(text), " ") if w]
    func = words[-1] if words else text
    depth = 0
    for i, ch in enumerate(func):
        if ch == "<" and depth == 0:
            inner = func[i + 1:]
            inner = inner[:-1] if inner.endswith(">") else inner
            return func[:i], inner.strip()
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth = max(0, depth - 1)
    return func, ""


_OP_PATTERNS = [
    re.compile(r"(\w+)_kernel_cuda\b"),  # direct_copy_kernel_cuda, neg_kernel_cuda ...
    re.compile(r"(\w*Functor\w*<[^<>]*>)"),  # FillFunctor<long>, MulFunctor<float>, CUDAFunctor_add<...>
    re.compile(r"(\w+Ops<[^<>]*>)"),  # ArgMaxOps<float>, MeanOps<...>
    re.compile(r"(\w+_functor)<"),  # sum_functor
    re.compile(r"::(\w+_kernel)\("),  # silu_kernel(at::TensorIteratorBase&)
    re.compile(r"::(\w+)_kernel_impl\b"),  # index_kernel_impl, index_put_kernel_impl
]
_LAMBDA_ARG = re.compile(r"(?:\{lambda|\[lambda)\(([\w:, ]+)\)")


_BF16 = re.compile(r"\b(__nv_bfloat16|__hip_bfloat16|cutlass::bfloat16_t)\b")


def _clean_type(text: str) -> str:
    text = _BF16.sub("bf16", text)
    return re.sub(r"\b(c10|at|std|cutlass|at::native)::", "", text).replace("  ", " ").strip()


def _aten_qualifier(args: str) -> str:
    """The op (functor or *_kernel_cuda) and the element type of an ATen elementwise/reduce kernel.

    The element type is the argument of the first lambda; a lone trailing `lambda(int)` is the
    loop-index lambda of gpu_kernel_impl, not a dtype, unless the op itself is a named kernel.
    """
    candidates: list[str] = []
    named_op = False
    for index, pattern in enumerate(_OP_PATTERNS):
        found = pattern.findall(args)
        if found:
            candidates.append(found[-1] if index == 1 else found[0])
            named_op = index in (0, 4)
            break
    lambdas = _LAMBDA_ARG.findall(args)
    if len(lambdas) > 1 or (lambdas and named_op):
        candidates.append(lambdas[0].split(",")[0])
    return ", ".join(_clean_type(c) for c in candidates)


_MANGLED_LENGTH = re.compile(r"(\d+)(?=[A-Za-z_])")


def _readable_mangled(text: str, wrappers: frozenset[str]) -> str:
    """Last name of a mangled function; for a wrapper (ck_tile::kentry) the first long type name after it."""
    base = unmangle_prefix(text).split("::")[-1]
    if base not in wrappers:
        return base
    rest = text[text.find(base) + len(base):]
    pos = 0
    while pos < len(rest):
        match = _MANGLED_LENGTH.search(rest, pos)
        if not match:
            break
        length = int(match.group(1))
        ident = rest[match.end():match.end() + length]
        if length >= 8 and re.fullmatch(r"[A-Za-z_]\w*", ident):
            if ident in wrappers:  # nested wrapper (device_kernel<enable_3x_kernel_for_sm9x<Gemm>>)
                pos = match.end() + length
                continue
            # CUTLASS 3 grouped GEMMs (MoE experts) differ from plain ones only by their problem shape
            return f"{ident} (grouped)" if "GroupProblemShape" in rest else ident
        pos = match.end()
    return base


_SHORT_ARGS = re.compile(r"^[\w\s,().:+-]*$")
_CUTE_DSL = re.compile(r"([A-Z]\w*Kernel)_object_at")
_TENSILE_TILE = re.compile(r"_MT(\d+x\d+x\d+)")


def readable_name(name: str, families_file: str | None = None) -> str:
    """A short, human-readable name: last name component plus what distinguishes the variant."""
    text = name.strip()
    if text.startswith(("Memcpy", "Memset")):
        return text
    if text.startswith("_Z"):
        return _readable_mangled(text, _load(families_file or str(FAMILIES_FILE)).wrappers)
    if text.startswith("Cijk_"):
        tile = _TENSILE_TILE.search(text)
        return f"Tensile GEMM (MT{tile.group(1)})" if tile else text[:MAX_READABLE_CHARS]
    cute = _CUTE_DSL.search(text)
    if text.startswith("kernel_cutlass_kernel") and cute:
        return f"{cute.group(1)} (CuTe DSL)"
    qual, args = _unwrapped(text, _load(families_file or str(FAMILIES_FILE)).wrappers)
    parts = [p for p in qual.split("::") if p and p != "anon"]
    base = parts[-1] if parts else qual
    if base in ("GemmKernel", "Kernel", "kernel") and len(parts) >= 2:
        base = f"{parts[-2]}::{base}"
    elif len(parts) >= 2 and parts[-2] in ("internode_ll", "intranode", "internode", "internode_ll_v2", "gemvx", "decode"):
        base = f"{parts[-2]}::{base}"
    if "at::native" in qual or qual.startswith(("at_cuda_detail", "at::")):
        qualifier = _aten_qualifier(args)
    elif args and len(args) <= 40 and _SHORT_ARGS.match(args):
        qualifier = _clean_type(args)
    else:
        qualifier = ""
    result = f"{base} ({qualifier})" if qualifier else base
    if len(result) > MAX_READABLE_CHARS:
        result = result[: MAX_READABLE_CHARS - 1] + "…"
    return result
