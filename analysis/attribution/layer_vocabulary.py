"""What a decoder layer's parts are called, by how many there are and where: shared by both namers
that need no signature, the structural one (structure.py, kernels by their place around the attention
core) and the module-range one (module_roles.py, nn.Module calls by their place in the layer).

Why one place: MLA's projections (absorbed, written out, or plain q / k / v) and the routed experts'
GEMM calls are named by the same rule whether a kernel's place or a module's place says where it is;
kept in each namer, the two copies could drift and a trace analysed with and without its module
ranges would name the same kernel twice differently.
"""
from __future__ import annotations

ABSORBED_MLA, UNFUSED_MLA, EXPANDED_MLA, PLAIN = "absorbed_mla", "unfused_mla", "expanded_mla", "plain"


def attention_form(inner_norms: int, projections: int, rotary_before_last: bool = False) -> str:
    """How the attention's projections are laid out, from the norms between them: one norm between
    two or more projections is absorbed MLA (its q_a / kv_a layernorm), two norms among four
    projections MLA written out (transformers), two norms among three with the rotary embedding
    before the last MLA expanded for prefill (SGLang's MHA path: q_a and kv_a in one GEMM, q_b, then
    kv_b after the rotary and the KV-cache write; a q / k norm after each of q and k projections has
    its rotary after all three), anything else plain q / k / v projections. `rotary_before_last`:
    a rotary kernel runs between the last two projections (a namer that cannot tell passes False)."""
    if inner_norms == 1 and projections >= 2:
        return ABSORBED_MLA
    if inner_norms == 2 and projections == 4:
        return UNFUSED_MLA
    if inner_norms == 2 and projections == 3 and rotary_before_last:
        return EXPANDED_MLA
    return PLAIN


def projection_roles(form: str, projections: int, before_first_norm: int) -> list[str]:
    """Roles of the projections before the attention core, in launch order. Absorbed MLA: those before
    its norm are q_a and kv_a in one, the first after it q_b, the rest the W_UK batched matmul;
    written-out MLA: q_a, q_b, kv_a, kv_b; expanded MLA: q_a and kv_a in one, q_b, kv_b; plain: q / k / v."""
    if form == ABSORBED_MLA:
        return ["q_a_kv_a" if i < before_first_norm else ("q_b_proj" if i == before_first_norm else "w_kc_bmm")
                for i in range(projections)]
    if form == UNFUSED_MLA:
        return ["q_a_proj", "q_b_proj", "kv_a_proj", "kv_b_proj"]
    if form == EXPANDED_MLA:
        return ["q_a_kv_a", "q_b_proj", "kv_b_proj"]
    return ["qkv_proj"] * projections


def inner_norm_roles(form: str, inner_norms: int) -> list[str]:
    """Roles of the norms between the projections, in order."""
    if form == ABSORBED_MLA:
        return ["q_a_kv_a_layernorm"]
    if form in (UNFUSED_MLA, EXPANDED_MLA):
        return ["q_a_layernorm", "kv_a_layernorm"]
    return ["qk_norm"] * inner_norms


def routed_roles(kinds: list[str], gemm_calls: list[int | None]) -> list[str]:
    """Roles of a routed-experts stretch, in order: GEMM calls (numbered from 1) alternate up/gate and
    down (a per-expert loop repeats the pair), dispatch before the first, combine after the last."""
    numbered = [i for i, call in enumerate(gemm_calls) if call is not None]
    first, last = (numbered[0], numbered[-1]) if numbered else (None, None)
    # an all-to-all before the first GEMM sends the tokens: what prepares it (counts, permutation,
    # send buffers) is the dispatch's; one after the last GEMM brings them back: what follows is the combine's
    sends = [i for i, k in enumerate(kinds) if k in ("dispatch", "a2a") and (first is None or i < first)]
    backs = [i for i, k in enumerate(kinds) if k in ("combine", "a2a") and last is not None and i > last]
    roles = []
    for i, (kind, call) in enumerate(zip(kinds, gemm_calls)):
        if call is not None:
            roles.append("up_gate_gemm" if call % 2 == 1 else "down_gemm")
        elif kind == "act":
            roles.append("expert_act")
        elif (kind in ("dispatch", "a2a") and (first is None or i < first)) or (sends and i < sends[-1]):
            roles.append("dispatch")
        elif (kind in ("combine", "a2a", "moe_finalize") and (last is None or i > last)) or (backs and i > backs[0]):
            roles.append("combine")
        elif kind == "allreduce":
            roles.append("all_reduce")
        else:
            roles.append("experts")
    return roles
