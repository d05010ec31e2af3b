"""Turn what a vLLM start-up log states (``parse.LogFacts``) into a Calibration.

``calibrate`` turns those facts into what ``memory``/``plan`` can use: the available KV bytes
per GPU as the interval the two-decimal GiB figure allows, the block count where the printed
numbers pin it down exactly, the logged lines, and a best estimate of the real pool — with a
note on how each was derived, or why it cannot be. ``calibrate_against`` compares a
``MemoryReport`` (servesize's prediction) with a Calibration.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields

from servesize.errors import BadInput
from servesize.units import GiB, cdiv
from servesize.vllm_logs.parse import LogFacts, era_of

# --------------------------------------------------------------------------------------------
# Calibration
# --------------------------------------------------------------------------------------------

GIB_HALF_STEP = 0.005  # the log rounds GiB to two decimals


@dataclass(frozen=True)
class Calibration:
    """What a real start-up log says, in the terms servesize's memory/plan use."""

    source: str
    era: str
    vllm_version: str | None = None
    model: str | None = None
    tensor_parallel_size: int | None = None
    max_model_len: int | None = None
    kv_cache_dtype: str | None = None
    gpu_memory_utilization: float | None = None
    quantization: str | None = None
    block_size: int | None = None
    # [lo, hi) bytes per GPU: the logged GiB figure +- half of its last digit
    available_kv_bytes_per_gpu: tuple[int, int] | None = None
    available_kv_gib_logged: float | None = None
    num_blocks: int | None = None
    num_blocks_how: str = ""
    kv_cache_tokens_logged: int | None = None
    cpu_kv_cache_tokens_logged: int | None = None
    max_concurrency: float | None = None
    max_concurrency_tokens: int | None = None
    pool_tokens: int | None = None
    pool_tokens_how: str = ""
    weights_gib: float | None = None
    activation_gib: float | None = None
    non_torch_gib: float | None = None
    cudagraph_gib: float | None = None
    total_gpu_memory_gib: float | None = None
    ranks: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def available_kv_bytes_mid(self) -> int | None:
        if self.available_kv_bytes_per_gpu is None:
            return None
        lo, hi = self.available_kv_bytes_per_gpu
        return (lo + hi) // 2

    def to_dict(self) -> dict:
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = list(v) if isinstance(v, tuple) else v
        return out

    @classmethod
    def from_dict(cls, data: dict) -> Calibration:
        if not isinstance(data, dict):
            raise BadInput("a calibration must be a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise BadInput(f"unknown calibration field(s): {', '.join(unknown)}")
        if "source" not in data or "era" not in data:
            raise BadInput("a calibration needs at least 'source' and 'era'")
        kw = dict(data)
        if kw.get("available_kv_bytes_per_gpu") is not None:
            lo, hi = kw["available_kv_bytes_per_gpu"]
            kw["available_kv_bytes_per_gpu"] = (int(lo), int(hi))
        for name in ("ranks", "notes"):
            if name in kw:
                kw[name] = tuple(kw[name])
        return cls(**kw)

def gib_interval(gib: float) -> tuple[int, int]:
    """Bytes [lo, hi) that a figure printed as ``gib`` with two decimals can stand for."""
    return int(math.ceil((gib - GIB_HALF_STEP) * GiB)), int(math.ceil((gib + GIB_HALF_STEP) * GiB))


def _unique(candidates: list[int]) -> int | None:
    c = sorted(set(candidates))
    return c[0] if len(c) == 1 else None


def _mamba_blocks_per_request(mode: str | None) -> list[int]:
    """Blocks one request pins in each Mamba/GDN group: 1 in 'none' mode, 2 in 'align' (§3.2)."""
    if mode == "none":
        return [1]
    if mode == "align":
        return [2]
    return [1, 2]


def calibrate(facts: LogFacts, *, block_size: int | None = None, kv_cache_groups: int | None = None,
              blocks_per_request: int | None = None, mamba_cache_mode: str | None = None) -> Calibration:
    """Turn a start-up's facts into a Calibration.

    ``block_size``, ``kv_cache_groups`` (how many KV-cache groups the model has), ``blocks_per_request``
    (the per-request block sum at max_model_len) and ``mamba_cache_mode`` are what the log
    does not say for hybrid models; give them when you know them (``servesize memory`` prints them),
    and the block count is pinned down where the printed numbers allow exactly one value."""
    notes = list(facts.notes)
    era, era_how = era_of(facts)
    notes.append(f"log formula era {era}: {era_how}")
    version = facts.vllm_version
    L = facts.value("max_concurrency_tokens") or facts.value("max_model_len")
    logged_L = facts.value("max_concurrency_tokens")
    if facts.value("max_model_len") and logged_L and facts.value("max_model_len") != logged_L:
        notes.append(f"max_model_len {facts.value('max_model_len'):,} in the config but {logged_L:,} in the concurrency line; "
                     "using the concurrency line's")
    tokens = facts.gpu_kv_cache_tokens if facts.gpu_kv_cache_tokens is not None else facts.cpu_kv_cache_tokens
    C = facts.max_concurrency
    attn_block = facts.value("attention_block_size")
    hybrid = bool(attn_block or facts.fact("mamba_padding_pct") or facts.fact("padding_layers") or facts.fact("mamba_cache_mode")
                  or mamba_cache_mode or (kv_cache_groups and kv_cache_groups > 1))
    B = block_size or attn_block or facts.value("block_size") or facts.value("forced_block_size")
    B_how = ("value given" if block_size else "'Setting attention block size' line" if attn_block
             else "engine config" if facts.value("block_size") else "'Forcing kv cache block size' line"
             if facts.value("forced_block_size") else "")
    mode = mamba_cache_mode or facts.value("mamba_cache_mode")

    # Per-rank: the pool is the minimum.
    for name, what in (("gpu_kv_cache_tokens", "GPU KV cache size"), ("available_kv_gib", "Available KV cache memory")):
        per = facts.per_rank(name)
        if len(set(per.values())) > 1:
            low = facts.min_fact(name)
            notes.append(f"'{what}' differs between workers ({', '.join(f'{k}: {v:,}' for k, v in per.items())}); "
                         f"the pool is the minimum, {low.value:,} (line {low.line_no})")

    # Available KV bytes per GPU.
    avail = facts.min_fact("available_kv_gib")
    interval = gib_interval(avail.value) if avail is not None else None
    exact_bytes = (facts.value("suggestion") or {}).get("kv_cache_in_use_bytes")
    if interval is None and exact_bytes:
        interval = (exact_bytes, exact_bytes + 1)
        notes.append("available KV bytes from the suggestion line's 'Current kv cache memory in use' (exact bytes, as the "
                     "worker that printed that line had them)")
    if avail is not None and avail.value > 0:
        notes.append(f"available KV memory is printed with two decimals: {avail.value} GiB means "
                     f"[{interval[0]:,}, {interval[1]:,}) bytes per GPU")

    # Number of blocks.
    mamba = bool(attn_block or mode or facts.fact("mamba_padding_pct"))
    G = kv_cache_groups or (None if hybrid else 1)
    single_group_how = "" if kv_cache_groups else " (no hybrid line printed: one KV-cache group assumed)"
    single_ok = True  # are the printed lines consistent with one KV-cache group?
    if G == 1 and tokens is not None and C is not None and L:
        b = B or 16
        lo_t, hi_t = (C - GIB_HALF_STEP) * L - b, (C + GIB_HALF_STEP) * (L + b)
        if not lo_t <= tokens <= hi_t:
            single_ok = False
            notes.append(f"{tokens:,} tokens vs concurrency x max_model_len = {C * L:,.0f}: too far apart for one "
                         "KV-cache group, so the model has several (pass --block-size and --kv-cache-groups)")
        elif era == "v1-new" and L % b == 0 and tokens % b:
            single_ok = False
            notes.append(f"{tokens:,} tokens is not a multiple of the block size ({b}{'' if B else ', assumed'}) although "
                         f"max_model_len is: not a single-group pool")
    if not single_ok:
        G = kv_cache_groups

    def per_request_options() -> list[int]:
        if blocks_per_request:
            return [blocks_per_request]
        if not (B and L and G):
            return []
        if G == 1:
            return [cdiv(L, B)]
        if mamba:
            return [cdiv(L, B) + (G - 1) * m for m in _mamba_blocks_per_request(mode)]
        return []

    n, n_how = None, ""
    blocks = facts.gpu_blocks
    if blocks is not None:
        n, n_how = blocks, "logged '# GPU blocks'"
        if B is None and C is not None and logged_L:
            fits = [b for b in (8, 16, 32, 64, 128, 256) if f"{blocks * b / logged_L:.2f}" == f"{C:.2f}"]
            if len(fits) == 1:
                B, B_how = fits[0], f"the only block size for which {blocks:,} x B / {logged_L:,} prints {C:.2f}x"
    elif tokens is not None and B and G and era in ("v1-uniform", "v1-hybrid-old"):
        q, r = divmod(tokens, B)
        if r:
            notes.append(f"{tokens:,} tokens is not a multiple of block size {B}: the block count is not exact")
        else:
            cands = list(range(q * G, q * G + G))
            how = f"(n // {G} group{'s' if G > 1 else ''}) x {B} = {tokens:,}" + (single_group_how if G == 1 else "")
            per_req = per_request_options() if G > 1 else []
            if C is not None and per_req:
                cands = [c for c in cands if any(f"{c / s:.2f}" == f"{C:.2f}" for s in per_req)]
                how += f", and n / {' or '.join(map(str, sorted(set(per_req))))} blocks per request prints {C:.2f}x"
            n = _unique(cands)
            if n is not None:
                n_how = how
            else:
                notes.append(f"the printed lines allow {len(set(cands))} block counts ({how}); not exact")
    elif tokens is not None and B and L and era == "v1-new":
        per_req = per_request_options()
        cands = []
        for s in per_req:
            # tokens = int(n / s * L): n in [tokens * s / L, (tokens + 1) * s / L)
            lo, hi = math.ceil(tokens * s / L), math.ceil((tokens + 1) * s / L)
            cands += [c for c in range(lo, hi + 1) if int(c / s * L) == tokens and (C is None or f"{c / s:.2f}" == f"{C:.2f}")]
        n = _unique(cands)
        if n is not None:
            s = next(s for s in per_req if int(n / s * L) == tokens)
            n_how = (f"int(n / {s} blocks per request x {L:,}) = {tokens:,} (v0.20.1+ line, block size {B})"
                     + (single_group_how if G == 1 else ""))
        elif len(set(cands)) > 1:
            notes.append(f"the printed lines allow {len(set(cands))} block counts; not exact")
    if n is None:
        missing = [w for w, v in (("the block size", B), ("the KV-cache group count", G)) if not v]
        n_how = "not inferable exactly from the printed lines" + (f" without {' and '.join(missing)}" if missing and tokens else "")

    # The real pool.
    pool, pool_how = None, ""
    if era == "v0":
        if n is not None and B:
            pool, pool_how = n * B, f"# GPU blocks x block size ({n:,} x {B})"
        else:
            pool_how = "unknown: the block size is not printed (pass it)"
    elif n is not None and B and G == 1:
        pool, pool_how = (n - 1) * B, f"(num_blocks - 1 null block) x block size = ({n:,} - 1) x {B}" + single_group_how
    elif n is not None and B and mamba and G:
        pool, pool_how = (n - 1) * B, (f"(num_blocks - 1) x attention block size = ({n:,} - 1) x {B}: one request's attention "
                                       f"tokens; each request also pins 1-2 blocks in each of the {G - 1} Mamba/GDN group(s)")
    elif tokens is None:
        pool_how = "unknown: no token or block line"
    elif era == "unknown":
        pool_how = "unknown: the log formula's era is unknown (print or pass the vLLM version)"
    elif G == 1 and era in ("v1-uniform", "v1-hybrid-old"):
        pool, pool_how = tokens, "logged tokens: the pre-v0.20.1 line is num_blocks x block size for one KV-cache group" + single_group_how
    elif G == 1:
        pool, pool_how = tokens, ("logged tokens: since v0.20.1 the line is concurrency x max_model_len, which equals num_blocks x "
                                  "block size for one KV-cache group" + single_group_how)
    elif era == "v1-hybrid-old" and mamba and G:
        pool, pool_how = tokens * G, (f"logged tokens x {G} groups: the pre-v0.20.1 line divides the blocks by every group, "
                                      "while Mamba/GDN groups need only 1-2 blocks per request")
    elif era == "v1-new":
        pool_how = (f"unknown: since v0.20.1 the token line is concurrency x max_model_len ({C} x {L:,}), not the pool, and "
                    "with several KV-cache groups the pool depends on them; pass --block-size and --kv-cache-groups")
    else:
        pool_how = ("unknown: the pre-v0.20.1 line divides the blocks by every KV-cache group and this model has several; "
                    "pass --block-size and --kv-cache-groups (servesize memory prints the groups)")
    if era == "v1-hybrid-old" and G != 1 and tokens is not None and C and L and C * L > 1.05 * tokens:
        notes.append(f"the pre-v0.20.1 token line under-reports models with several KV-cache groups: concurrency x "
                     f"max_model_len = {C * L:,.0f} vs {tokens:,} logged")


    # Budget terms.
    sugg = facts.value("suggestion") or {}
    weights = facts.value("weights_gib") or sugg.get("weights_gib")
    loading = max((f.value for f in facts.all("model_loading_gib")), default=None)
    if weights is None:
        weights = loading
    if facts.fact("model_loading_gib") and re.search(r"took\s+[0-9.]+\s*GB\b", facts.fact("model_loading_gib").line):
        notes.append("'Loading model weights took X GB': vLLM divided by 2**30, so X is GiB")
    activation = facts.value("activation_gib") or sugg.get("activation_gib")
    profile = facts.value("v0_memory_profile") or {}
    if activation is None and "peak_torch_memory" in profile and weights is not None:
        activation = round(profile["peak_torch_memory"] - weights, 4)
        notes.append("activation = V0 peak_torch_memory - weights (the V0 peak includes the weights)")
    non_torch = facts.value("non_torch_gib") or sugg.get("non_torch_gib")
    if non_torch is None and "weights_plus_non_torch_gib" in sugg and loading is not None:
        non_torch = round(sugg["weights_plus_non_torch_gib"] - loading, 4)
        notes.append("non-torch = suggestion line's 'weights + non-torch' - 'Model loading took'")
    cudagraph = facts.value("cudagraph_estimate_gib")
    if cudagraph is None:
        cudagraph = sugg.get("cudagraph_gib") or facts.value("cudagraph_actual_gib")
    if facts.fact("kv_cache_memory_given"):
        notes.append("the KV memory was given with --kv-cache-memory-bytes (the utilisation budget was skipped)")
    cpu_blocks = facts.value("cpu_blocks")
    if cpu_blocks:
        notes.append(f"# CPU blocks {cpu_blocks:,}: V0 swap space, not part of the GPU pool")
    if facts.cpu_kv_cache_tokens is not None and facts.gpu_kv_cache_tokens is None:
        notes.append("CPU build: 'CPU KV cache size' is the pool in host memory (block size a multiple of 32, default 128)")

    return Calibration(
        source=facts.source, era=era, vllm_version=version, model=facts.value("model"),
        tensor_parallel_size=facts.value("tensor_parallel_size"), max_model_len=L,
        kv_cache_dtype=facts.value("kv_cache_dtype"), gpu_memory_utilization=facts.value("gpu_memory_utilization"),
        quantization=facts.value("quantization"), block_size=B,
        available_kv_bytes_per_gpu=interval, available_kv_gib_logged=avail.value if avail is not None else None,
        num_blocks=n, num_blocks_how=n_how + (f"; block size: {B_how}" if n is not None and B_how else ""),
        kv_cache_tokens_logged=tokens, cpu_kv_cache_tokens_logged=facts.cpu_kv_cache_tokens,
        max_concurrency=C, max_concurrency_tokens=logged_L, pool_tokens=pool, pool_tokens_how=pool_how,
        weights_gib=weights, activation_gib=activation, non_torch_gib=non_torch, cudagraph_gib=cudagraph,
        total_gpu_memory_gib=facts.value("total_gpu_memory_gib"), ranks=facts.ranks, notes=tuple(notes),
    )


# --------------------------------------------------------------------------------------------
# Prediction vs log
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    name: str
    predicted: float
    logged: float | tuple[float, float]
    error: float  # predicted - logged (0 when inside a logged interval)
    error_pct: float | None
    unit: str

    def to_dict(self) -> dict:
        logged = list(self.logged) if isinstance(self.logged, tuple) else self.logged
        return {"name": self.name, "predicted": self.predicted, "logged": logged, "error": self.error,
                "error_pct": self.error_pct, "unit": self.unit}


@dataclass(frozen=True)
class CalibrationCheck:
    source: str
    checks: tuple[Check, ...]
    notes: tuple[str, ...] = ()

    def get(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    def to_dict(self) -> dict:
        return {"source": self.source, "checks": [c.to_dict() for c in self.checks], "notes": list(self.notes)}



def _check(name: str, predicted, logged, unit: str) -> Check:
    if isinstance(logged, tuple):
        lo, hi = logged
        err = 0 if lo <= predicted < hi else (predicted - lo if predicted < lo else predicted - (hi - 1))
        ref = (lo + hi) / 2
    else:
        err = predicted - logged
        ref = logged
    if isinstance(err, float):
        err = round(err, 6)
    return Check(name, predicted, logged, err, round(100 * err / ref, 4) if ref else None, unit)


def calibrate_against(calibration: Calibration, report) -> CalibrationCheck:
    """Compare servesize's ``MemoryReport`` for the same model and flags with what the log says."""
    checks: list[Check] = []
    notes: list[str] = []
    pool, budget = report.pool, report.budget
    if calibration.available_kv_bytes_per_gpu is not None:
        checks.append(_check("available_kv_bytes_per_gpu", budget.available_bytes, calibration.available_kv_bytes_per_gpu, "B"))
    if calibration.num_blocks is not None:
        checks.append(_check("num_blocks", pool.num_blocks, calibration.num_blocks, "blocks"))
    if calibration.kv_cache_tokens_logged is not None:
        checks.append(_check("kv_cache_tokens_logged", pool.kv_cache_tokens, calibration.kv_cache_tokens_logged, "tokens"))
    if calibration.max_concurrency is not None:
        checks.append(_check("max_concurrency", round(pool.max_concurrency, 2), calibration.max_concurrency, "x"))
    if calibration.pool_tokens is not None:
        checks.append(_check("pool_tokens", pool.usable_kv_tokens, calibration.pool_tokens, "tokens"))
    if calibration.weights_gib is not None:
        checks.append(_check("weights_bytes_per_gpu", report.weights.per_gpu_bytes, gib_interval(calibration.weights_gib), "B"))
    for name, value, gib in (("activation_bytes", budget.activation_bytes, calibration.activation_gib),
                             ("non_torch_bytes", budget.non_torch_bytes, calibration.non_torch_gib),
                             ("cudagraph_bytes", budget.cudagraph_bytes, calibration.cudagraph_gib)):
        if gib is not None and budget.budget == "engine":
            checks.append(_check(name, value, gib_interval(gib), "B"))
    if calibration.max_model_len and pool.max_model_len != calibration.max_model_len:
        notes.append(f"max_model_len differs: servesize {pool.max_model_len:,}, log {calibration.max_model_len:,}; "
                     "run servesize memory with the log's --max-model-len")
    if calibration.block_size and pool.block_size != calibration.block_size:
        notes.append(f"block size differs: servesize {pool.block_size}, log {calibration.block_size}")
    return CalibrationCheck(calibration.source, tuple(checks), tuple(notes))
