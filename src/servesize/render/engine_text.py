"""Text reports of the engine's results (``servesize memory``, ``servesize fit``, ``servesize models``) and the
``render_text`` dispatcher every text report registers with. Imports the engine only: a memory report printed as
text never loads the planner (render/text.py registers the planner's reports when it is imported)."""

from __future__ import annotations

from functools import singledispatch
from typing import Any

from servesize.engine.memory import MemoryReport
from servesize.engine.models_table import ModelsResult, mla_latent_dim
from servesize.engine.placement import DEFAULT_MIN_CONCURRENCY, FitResult
from servesize.model.architecture import MLA
from servesize.units import GiB, KiB, MiB, fmt_bytes


def renders(result: Any) -> bool:
    """Whether a renderer is registered for ``result``'s type (else render/text.py may hold it, or the result
    renders itself)."""
    return render_text.dispatch(type(result)) is not render_text.dispatch(object)


@singledispatch
def render_text(result: Any, explain: bool = False) -> str:
    """The text report of ``result`` (its own ``render`` when no renderer is registered for its type)."""
    return result.render(explain)


def placement_lines(split) -> list[str]:
    """How --gpus was split, first, when servesize chose the split or GPUs stay idle (engine.placement.Split)."""
    return [split.text()] if split is not None and (split.chosen or split.gpus_idle) else []


def flag_lines(report: MemoryReport | None) -> list[str]:
    """The `vllm serve` flags accepted (on a --vllm-serve line or given directly) that servesize does not model."""
    if report is None:
        return []
    lines = [f"  warning: {text}" for text in report.flags_not_modelled]
    if report.flags_estimated:
        lines.append("  estimated either way: " + "; ".join(report.flags_estimated))
    if report.flags_not_affecting:
        lines.append("  not affecting these figures: " + ", ".join(report.flags_not_affecting))
    return lines


@render_text.register
def _memory(report: MemoryReport, explain: bool = False) -> str:
    dep, b, p, w = report.deployment, report.budget, report.pool, report.weights
    gpu = report.gpus.gpu
    lines = placement_lines(report.placement) + [
        f"{report.model} on {report.gpus.count} x {gpu.name} (TP {dep.tensor_parallel_size}, DP {dep.data_parallel_size}), "
        f"vLLM {dep.vllm_version}",
        f"  weights          {fmt_bytes(w.per_gpu_bytes)} per GPU ({w.precision}; {fmt_bytes(w.total_bytes)} in all)",
    ]
    if b.budget == "engine":
        lines += [
            f"  budget           {fmt_bytes(b.total_bytes)} x {dep.gpu_memory_utilization} = {fmt_bytes(b.requested_bytes)} per GPU",
            f"  reserve          activation {fmt_bytes(b.activation_bytes)} + non-torch {fmt_bytes(b.non_torch_bytes)}"
            f" + CUDA graphs {fmt_bytes(b.cudagraph_bytes)} (estimates; see --explain)",
        ]
    elif b.budget == "simple":
        lines.append(f"  budget           {fmt_bytes(b.total_bytes)} x {dep.gpu_memory_utilization} (simple: no reserve)")
    lines += [
        f"  available KV     {fmt_bytes(b.available_bytes)} per GPU",
        f"  KV per token     {p.kv_bytes_per_token:,} B per GPU"
        + (f"; state {fmt_bytes(p.state_bytes_per_sequence, 'MiB')} per sequence" if p.state_bytes_per_sequence else ""),
        f"  blocks           {p.num_blocks:,} of {p.block_size} tokens ({len(p.groups)} group(s) of {p.group_size} layer(s))",
        f"  usable           {p.usable_kv_tokens:,} tokens of context per replica"
        + (f" ({report.replicas} replicas, each its own pool)" if report.replicas > 1 else ""),
        "  vLLM will log:",
    ]
    lines += [f"    {line}" for line in p.log_lines]
    lines += [f"  note: {n}" for n in p.notes + report.notes]
    lines += [f"  warning: {wn}" for wn in report.warnings]
    if report.extra_weight_bytes:
        lines.append(f"  loaded with the weights: {fmt_bytes(report.extra_weight_bytes)} per GPU (LoRA slots / draft)")
    lines += flag_lines(report)
    if explain:
        lines += ["", "derivation:", report.derivation.render()]
    return "\n".join(lines)


_SHORT_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def _precision_label(precision: str) -> str:
    """'native (bfloat16)' -> 'bf16': the checkpoint's own precision, as the calculator seed prints it."""
    if precision.startswith("native (") and precision.endswith(")"):
        inner = precision[len("native ("):-1]
        return _SHORT_DTYPES.get(inner, inner)
    return precision


@render_text.register
def _fit(result: FitResult, explain: bool = False) -> str:
    g = result.gpus
    total_gib = g.count * g.gpu.memory_bytes / GiB
    which = ("every precision and placement that fits" if result.all_placements else
             "each at its checkpoint's own precision on the smallest placement that serves (--all: every one)")
    head = (f"{g.count} x {g.gpu.name} · {total_gib:,.0f} GiB of device memory (nvidia-smi) · "
            f"{g.gpu.bandwidth_gbps:,.0f} GB/s each\n"
            f"Models that fit at --max-model-len {result.context:,} ({result.budget} budget, vLLM {result.vllm_version}), "
            f"{which}:\n")
    rows: list[tuple[str, ...]] = [("model", "params", "precision", "weights", "placement", "per replica", "across group")]
    if explain:
        rows[0] += ("simple budget", "reserve/GPU")
    for p in result.placements:
        if not (p.chosen or result.all_placements):
            continue
        params = f"{p.params / 1e9:.2f}B" + (f" ({p.active_params / 1e9:.2f}B active)" if p.active_params != p.params else "")
        placement = (f"TP x{p.tp}, " if p.tp > 1 else "1 GPU, ") + f"{p.replicas} replica{'s' if p.replicas > 1 else ''}"
        row: tuple[str, ...] = (p.model, params, _precision_label(p.precision), f"{p.weights_bytes / GiB:.1f} GiB",
                                placement, f"~{p.concurrent_per_replica}", f"{p.concurrent_total}")
        if explain:
            row += (f"~{p.simple_concurrent_per_replica}", f"{p.reserve_bytes_per_gpu / GiB:.2f} GiB")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    table = "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
    tail = ("\nConcurrency = sequences whose KV fits at once at the full --max-model-len; shorter requests use less. "
            "Placement = smallest TP holding at least "
            f"{DEFAULT_MIN_CONCURRENCY} per replica.")
    if explain:
        tail += ("\n'simple budget' is the calculator seed's formula (utilisation x nvidia-smi memory - weights); "
                 "the difference from the engine budget is the named reserve (activation peak at "
                 "max_num_batched_tokens + non-torch + CUDA graphs) and CUDA's smaller visible total, per GPU as shown.")
    if result.refused and explain:
        tail += "\nNot shown, and why at each placement tried:"
        for model, reason in result.refused:
            tail += f"\n  {model}:" + "".join(f"\n    {part.strip()}" for part in reason.split("; "))
    elif result.refused:
        tail += f"\n{len(result.refused)} model/precision pair(s) fit nowhere on these GPUs (--explain says why)."
    return head + table + tail


@render_text.register
def _models(models: ModelsResult, explain: bool = False) -> str:
    header = ("model", "params", "layers", "heads", "KV", "hd", "KV/token", "KV/1Ki tok", "state/seq", "weights")
    table = [header, *(_model_row(r) for r in models.rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    left = {0, 2, 9}
    lines = ["  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()
             for row in table]
    lines += [
        "",
        "params: total (excluding MTP modules) / active per token for MoE, counted as the publisher counts it (the "
        "input embedding left out unless the catalogue's source counts it), B = 10**9 parameters.",
        "KV/token: whole model, 16-bit cache, tensor parallel 1; full-attention and MLA layers (MLA: the latent, hd = its width).",
        "  '+N ≤W' = sliding/chunked layers, which stop growing at W tokens; state/seq = GDN/Mamba state, constant per sequence.",
        "KiB = 2**10 B, MiB = 2**20 B.  * = built from a partial config.",
    ]
    if explain:
        for r in models.rows:
            lines += _model_explained(r)
    return "\n".join(lines)


def _model_row(r) -> tuple[str, ...]:
    """One catalogue model's row: parameters (total / active for MoE), geometry, KV and state per token, weights."""
    a = r.arch
    params = _billions(r.ledger.total)
    if r.ledger.num_experts:
        counts_embedding = r.entry is not None and r.entry.published_active_counts_embedding
        params += f" / {_billions(r.ledger.active if counts_embedding else r.ledger.active_as_published)}"
    kv_heads = "MLA" if a.count(MLA) else (str(a.num_kv_heads) if any(layer.is_attention for layer in a.layers) else "-")
    head_dim = f"{mla_latent_dim(a)}L" if a.count(MLA) else str(a.head_dim)
    kv = _kib(r.kv_bytes_per_token)
    if r.windowed_bytes_per_token:
        kv += f" +{_kib(r.windowed_bytes_per_token)} ≤{_tokens(r.window_tokens)}"
    return (
        r.key + ("*" if r.entry is not None and r.entry.partial else ""),
        params, r.layers_text, str(a.num_attention_heads), kv_heads, head_dim, kv,
        f"{r.kv_bytes_per_token * 1024 / MiB:,.0f} MiB" if r.kv_bytes_per_token * 1024 % MiB == 0
        else f"{r.kv_bytes_per_token * 1024 / MiB:,.1f} MiB",
        f"{r.state_bytes_per_sequence / MiB:,.1f} MiB" if r.state_bytes_per_sequence else "-",
        r.quantisation_text,
    )


def _model_explained(r) -> list[str]:
    """--explain: the model's config source, its parameter ledger and the published count beside it."""
    lines = ["", f"== {r.key} ({r.hf_id}) ==", f"config: {r.source}", r.ledger.explain()]
    if r.entry is not None and r.entry.published_params_text:
        lines.append(f"published: {r.entry.published_params_text}"
                     + (f" / {r.entry.published_active_text} active" if r.entry.published_active_text else "")
                     + f" [source: {r.entry.published_source}]")
    return lines


def _billions(n: int) -> str:
    b = n / 1e9
    return f"{b:,.0f}B" if b >= 100 else f"{b:.1f}B" if b >= 10 else f"{b:.2f}B"


def _kib(n: int) -> str:
    return f"{n / KiB:,.0f} KiB" if n % KiB == 0 else f"{n / KiB:,.2f} KiB"


def _tokens(n: int | None) -> str:
    return "-" if n is None else f"{n // 1024}k" if n % 1024 == 0 and n >= 1024 else str(n)
