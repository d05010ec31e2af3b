"""Turn what a vLLM start-up log states (``parse.LogFacts``) into a Calibration.

``calibrate`` turns those facts into what ``memory``/``plan`` can use: the available KV bytes
per GPU as the interval the two-decimal GiB figure allows, the block count where the printed
numbers pin it down exactly, the logged lines, and a best estimate of the real pool — with a
note on how each was derived, or why it cannot be. It is a chain of small steps, one per fact
(era, max_model_len, available KV interval, KV-cache groups, block size, block count, pool,
memory figures, set-up notes), each returning its value, how it was derived, and its notes.
``calibrate_against`` compares a ``MemoryReport`` (servesize's prediction) with a Calibration.
"""

from __future__ import annotations

import math
import re
from dataclasses import fields, replace
from typing import Any, Generic, TypeVar

from servesize.derivation import Derivation
from servesize.engine.pool import USABLE_KV_TOKENS, state_blocks_per_request
from servesize.engine.speculative import MAX_DRAFT_TOKENS
from servesize.errors import BadInput, clip
from servesize.frozen import frozen
from servesize.jsonable import Record
from servesize.limits import MAX_LAYERS, MAX_LOG_NUMBER
from servesize.units import GiB, cdiv
from servesize.vllm_logs.parse import LogFacts, era_of

# --------------------------------------------------------------------------------------------
# What a hybrid model's log does not state: declared once, for the calibrate flags and the explorer's controls
# --------------------------------------------------------------------------------------------


@frozen
class LogHint:
    """One thing ``calibrate`` may be told that a log does not print: its keyword, its flag, its words."""

    name: str            # the keyword of ``calibrate`` (and of the explorer's control)
    label: str           # what the explorer's control is called
    help: str
    metavar: str = ""
    choices: tuple[str, ...] = ()   # a choice; else a whole number from low to high
    low: int = 1
    high: int = 1 << 16

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


LOG_HINTS = (
    LogHint("block_size", "block size (tokens)",
            "KV block size, when the log does not print it (attention block size for Mamba hybrids)", "TOKENS"),
    LogHint("kv_cache_groups", "KV-cache groups", "number of KV-cache groups of the model (1 for plain attention models)",
            "N", high=MAX_LAYERS),
    LogHint("mamba_cache_mode", "Mamba cache mode",
            "Mamba/GDN state blocks per request: none = 1, align = 2 (when the log does not say)",
            choices=("none", "align")),
    LogHint("num_speculative_tokens", "draft tokens per step",
            "draft tokens per step of the server's speculative decoding (MTP, EAGLE, ...): each Mamba/GDN group then "
            "holds K more blocks per request", "K", low=0, high=MAX_DRAFT_TOKENS),
    LogHint("blocks_per_request", "blocks per request",
            "the blocks one max_model_len request holds over every KV-cache group ('blocks_per_request' in servesize "
            "memory --explain), where a kernel adds blocks the flags above do not say", "S", high=MAX_LAYERS << 16),
)


# --------------------------------------------------------------------------------------------
# Calibration
# --------------------------------------------------------------------------------------------

GIB_HALF_STEP = 0.005  # the log rounds GiB to two decimals


@frozen
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
    kv_cache_groups: int | None = None  # as the caller gave it: a calibration of another grouping is another model's
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
    # a step-model calibration (calibrate --vllm-bench): the GPU it was measured on, and the base efficiencies that
    # make servesize bench reproduce the benchmark's mean TPOT and TTFT
    gpu: str | None = None
    bandwidth_efficiency: float | None = None
    mfu: float | None = None
    moe_backend: str | None = None  # the fused-MoE kernel the benchmarked server ran (--moe-backend; None: not said)
    # the GPU's FP8 prefill share the MFU was solved beside (planning.inputs Fixed.fp8_prefill_share: 0 where none
    # applies), so that the calibration prices the prefill it was solved to reproduce whatever gpus.toml says later;
    # None: written before 2026-12-07 (commit a5fefb5), when FP8 prefill ran at step.prefill_efficiency_fp8, as a
    # share of 0 still does
    fp8_prefill_share: float | None = None
    # the measured rate (TB/s, one GPU) the routed experts' MoE kernel was read at when the bandwidth efficiency was
    # solved (Fixed.expert_kernel_bytes_per_s; 0: none, the experts at step.moe_expert_efficiency), so that the
    # calibration prices the decode it was solved to reproduce; None: written before 2026-12-07 21:00 UTC, when bf16
    # experts had no measured rate (FP4 experts on Hopper had theirs already)
    expert_kernel_tbps: float | None = None

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
        kw = {name: _field_value(name, value) for name, value in data.items()}
        return cls(**kw)


_TEXT_FIELDS = {"source", "era", "num_blocks_how", "pool_tokens_how"}
_COUNT_FIELDS = {"tensor_parallel_size", "max_model_len", "block_size", "kv_cache_groups", "num_blocks", "kv_cache_tokens_logged",
                 "cpu_kv_cache_tokens_logged", "max_concurrency_tokens", "pool_tokens"}
_MAX_CALIBRATION_NUMBER = MAX_LOG_NUMBER  # no count or byte figure of a start-up comes near it
# Counts with a range of their own: the Scenario's (--tensor-parallel-size 1..1,024, --block-size 1..65,536)
_COUNT_BOUNDS = {"tensor_parallel_size": (1, 1024), "block_size": (1, 1 << 16), "kv_cache_groups": (1, MAX_LAYERS)}


def _field_value(name: str, value: Any) -> Any:
    """One calibration field, checked against its kind (text, count, figure, byte interval, list of text);
    refused naming the field and the value, never passed on to fail later."""
    if name in _TEXT_FIELDS:
        return _checked(name, value, isinstance(value, str), "text")
    if name in ("ranks", "notes"):
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return tuple(_checked(name, value, ok, "a list of text"))
    if value is None:
        return None
    if name == "available_kv_bytes_per_gpu":
        ok = isinstance(value, list) and len(value) == 2 and all(_is_count(v) for v in value) and value[0] <= value[1]
        lo, hi = _checked(name, value, ok, "[lo, hi] bytes (two whole numbers, lo <= hi)")
        return int(lo), int(hi)
    if name in _COUNT_BOUNDS:
        lo, hi = _COUNT_BOUNDS[name]
        ok = _is_count(value) and lo <= value <= hi
        return int(_checked(name, value, ok, f"a whole number in [{lo:,}, {hi:,}]"))
    if name in _COUNT_FIELDS:
        return int(_checked(name, value, _is_count(value), f"a whole number in [0, {_MAX_CALIBRATION_NUMBER:g}]"))
    if name in ("vllm_version", "model", "kv_cache_dtype", "quantization", "gpu", "moe_backend"):
        return _checked(name, value, isinstance(value, str), "text or null")
    if name in _FRACTION_FIELDS:
        return _fraction(name, value)
    if name in _SHARE_FIELDS:
        return _share(name, value)
    lo = -_MAX_CALIBRATION_NUMBER if name == "non_torch_gib" else 0  # vLLM's non-torch figure is a difference
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and lo <= value <= _MAX_CALIBRATION_NUMBER
    return float(_checked(name, value, ok, f"a number in [{lo:g}, {_MAX_CALIBRATION_NUMBER:g}] or null"))


_FRACTION_FIELDS = ("bandwidth_efficiency", "mfu")  # a step-model calibration's efficiencies


# what a calibration's efficiencies were solved beside, each with its upper bound: the FP8 prefill share (gpus.toml's
# bounds, model/hardware.py) and the experts' kernel rate in TB/s (under any GPU's memory bandwidth); 0: none applied
_SHARE_FIELDS = {"fp8_prefill_share": 1.5, "expert_kernel_tbps": 100.0}


def _share(name: str, value: Any) -> float:
    """A figure a calibration was solved beside, in [0, its bound]; 0: none applied."""
    top = _SHARE_FIELDS[name]
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and 0 <= value <= top
    return float(_checked(name, value, ok, f"a number in [0, {top:g}] or null"))


def _fraction(name: str, value: Any) -> float:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and 0 < value <= 1
    return float(_checked(name, value, ok, "a fraction in (0, 1] or null"))


def _checked(name: str, value: Any, ok: bool, kind: str) -> Any:
    if not ok:
        raise BadInput(f"calibration field {name!r} must be {kind}, got {clip(str(value), 40)}")
    return value


def _is_count(value: Any) -> bool:
    return (not isinstance(value, bool) and isinstance(value, (int, float)) and 0 <= value <= _MAX_CALIBRATION_NUMBER
            and (isinstance(value, int) or float(value).is_integer()))  # bounds first: a 400-digit int overflows a float


def gib_interval(gib: float) -> tuple[int, int]:
    """Bytes [lo, hi) that a figure printed as ``gib`` with two decimals can stand for."""
    return max(0, int(math.ceil((gib - GIB_HALF_STEP) * GiB))), int(math.ceil((gib + GIB_HALF_STEP) * GiB))


# --------------------------------------------------------------------------------------------
# calibrate: one step per fact it derives
# --------------------------------------------------------------------------------------------

_T = TypeVar("_T")

_CONCURRENCY_HALF_STEP = 0.005  # the log prints the concurrency with two decimals too
_BLOCK_SIZES = (8, 16, 32, 64, 128, 256)  # tried where the log prints '# GPU blocks' but no block size
_OLD_TOKEN_LINE_ERAS = ("v1-uniform", "v1-hybrid-old")  # 'GPU KV cache size' = (n // G groups) x B (§6)
# Where the pre-v0.20.1 line leaves G block counts and nothing narrows them (sliding-window groups: the
# concurrency depends on a batch size the log does not print), they are G consecutive counts; where they lie
# within this fraction of each other the lowest is taken (a pool at most this much below the engine's, never
# above it). 138,747-138,753 for the kvcached#215 Gemma-3 log: 0.004%.
MAX_BLOCK_COUNT_SPREAD = 0.001
_ONE_GROUP_ASSUMED = " (no hybrid line printed: one KV-cache group assumed)"


def _unique(candidates: list[int]) -> int | None:
    c = sorted(set(candidates))
    return c[0] if len(c) == 1 else None


def _prints_as(value: float, printed: float) -> bool:
    """Whether ``value``, printed with two decimals as vLLM prints the concurrency, reads as ``printed`` does."""
    return f"{value:.2f}" == f"{printed:.2f}"


def _mamba_blocks_per_request(mode: str | None, spec_tokens: int = 0) -> list[int]:
    """Blocks one request pins in each Mamba/GDN group: 1 in 'none' mode, 2 in 'align' (§3.2), plus one per draft
    token under speculative decoding (engine.pool.state_blocks_per_request, the engine's own rule); both
    candidates while the mode is unknown."""
    modes = [mode] if mode in ("none", "align") else ["none", "align"]
    return [state_blocks_per_request(m, spec_tokens) for m in modes]


@frozen
class _Derived(Generic[_T]):
    """What one step derived: the value, how it was derived, and what the step noticed on the way."""

    value: _T
    how: str = ""
    notes: tuple[str, ...] = ()


@frozen
class _PoolLines:
    """What the start-up's lines (and the caller) say about the KV pool, in vllm-kv-sizing.md's letters (§4, §6)."""

    era: str
    tokens: int | None  # the 'GPU KV cache size' tokens (else 'CPU KV cache size'), the minimum over workers
    concurrency: float | None  # C, as printed: 'Maximum concurrency for L tokens per request: C x'
    max_model_len: int | None  # L: the concurrency line's tokens, else the configured max_model_len
    block_size: int | None  # B: the (attention) block size
    groups: int | None  # G: KV-cache groups; None while not known (several, or not yet decided)
    groups_given: bool  # G came from the caller, not from the absence of a hybrid line
    mamba: bool  # some groups are Mamba/GDN state, which pin 1-2 blocks per request however long it is
    mamba_cache_mode: str | None
    blocks_per_request: int | None  # the caller's per-request block sum at L
    spec_tokens: int = 0  # draft tokens per step: each Mamba/GDN group pins one more block per request for each

    @property
    def one_group_how(self) -> str:
        """Said after a figure that holds for one KV-cache group, when that one group was assumed."""
        return _ONE_GROUP_ASSUMED if self.groups == 1 and not self.groups_given else ""


def _era(facts: LogFacts) -> _Derived[str]:
    """Which formula the log's lines follow (vllm-kv-sizing.md §6)."""
    era, how = era_of(facts)
    return _Derived(era, how, (f"log formula era {era}: {how}",))


def _max_model_len(facts: LogFacts) -> _Derived[int | None]:
    """L: the concurrency line's tokens per request, else the configured max_model_len."""
    logged = facts.value("max_concurrency_tokens")
    configured = facts.value("max_model_len")
    notes: tuple[str, ...] = ()
    if configured and logged and configured != logged:
        notes = (f"max_model_len {configured:,} in the config but {logged:,} in the concurrency line; using the concurrency line's",)
    return _Derived(logged or configured, notes=notes)


def _kv_tokens_logged(facts: LogFacts) -> int | None:
    """The token line: 'GPU KV cache size', or on a CPU build 'CPU KV cache size'."""
    return facts.gpu_kv_cache_tokens if facts.gpu_kv_cache_tokens is not None else facts.cpu_kv_cache_tokens


def _looks_hybrid(facts: LogFacts, kv_cache_groups: int | None, mamba_cache_mode: str | None) -> bool:
    """Whether the model may have several KV-cache groups: the log printed a hybrid line, or the caller says so."""
    return bool(facts.value("attention_block_size") or facts.fact("mamba_padding_pct") or facts.fact("padding_layers")
                or facts.fact("mamba_cache_mode") or mamba_cache_mode or (kv_cache_groups and kv_cache_groups > 1))


def _has_mamba_groups(facts: LogFacts, mamba_cache_mode: str | None) -> bool:
    """Whether some KV-cache groups hold Mamba/GDN state: an attention block size was set to fit the state page,
    a Mamba cache mode is known, or the Mamba page was padded (§5.1)."""
    return bool(facts.value("attention_block_size") or mamba_cache_mode or facts.fact("mamba_padding_pct"))


def _stated_block_size(facts: LogFacts, given: int | None) -> _Derived[int | None]:
    """B as stated: by the caller, else by the first of the log's lines that prints one."""
    sources = ((given, "value given"),
               (facts.value("attention_block_size"), "'Setting attention block size' line"),
               (facts.value("block_size"), "engine config"),
               (facts.value("forced_block_size"), "'Forcing kv cache block size' line"))
    for value, how in sources:
        if value:
            return _Derived(value, how)
    return _Derived(sources[-1][0])  # none states one: None, or the 0 a 'Forcing ... to 0' line would print, as read


def _block_size_from_concurrency(blocks: int, concurrency: float | None, concurrency_tokens: int | None) -> _Derived[int | None]:
    """B where the log prints '# GPU blocks' but no block size: C = n x B / L (§6), printed with two decimals,
    is often true for one B only."""
    if concurrency is None or not concurrency_tokens:
        return _Derived(None)
    fits = [b for b in _BLOCK_SIZES if _prints_as(blocks * b / concurrency_tokens, concurrency)]
    if len(fits) != 1:
        return _Derived(None)
    return _Derived(fits[0], f"the only block size for which {blocks:,} x B / {concurrency_tokens:,} prints {concurrency:.2f}x")


def _rank_notes(facts: LogFacts) -> tuple[str, ...]:
    """Workers that profiled differently: vLLM sizes the pool by the minimum (§4.5)."""
    notes = []
    for name, what in (("gpu_kv_cache_tokens", "GPU KV cache size"), ("available_kv_gib", "Available KV cache memory")):
        per = facts.per_rank(name)
        if len(set(per.values())) > 1:
            low = min(facts.all(name), key=lambda f: f.value)
            shown = ', '.join(f'{k}: {v:,}' for k, v in list(per.items())[:8])  # a note stays one short line
            more = f", and {len(per) - 8:,} more" if len(per) > 8 else ""
            notes.append(f"'{what}' differs between workers ({shown}{more}); "
                         f"the pool is the minimum, {low.value:,} (line {low.line_no})")
    return tuple(notes)


def _available_kv_bytes(facts: LogFacts) -> _Derived[tuple[int, int] | None]:
    """[lo, hi) bytes per GPU: what the two-decimal 'Available KV cache memory' figure allows, else the exact bytes
    of the suggestion line."""
    avail = facts.min_fact("available_kv_gib")
    if avail is not None:
        lo, hi = gib_interval(avail.value)
        notes: tuple[str, ...] = ()
        if avail.value > 0:
            notes = (f"available KV memory is printed with two decimals: {avail.value} GiB means [{lo:,}, {hi:,}) bytes per GPU",)
        return _Derived((lo, hi), notes=notes)
    exact_bytes = (facts.value("suggestion") or {}).get("kv_cache_in_use_bytes")
    if exact_bytes:
        return _Derived((exact_bytes, exact_bytes + 1), notes=(
            "available KV bytes from the suggestion line's 'Current kv cache memory in use' (exact bytes, as the "
            "worker that printed that line had them)",))
    return _Derived(None)


def _one_group_doubt(lines: _PoolLines) -> str | None:
    """Why the token and concurrency lines cannot come from one KV-cache group, or None when they can."""
    tokens, C, L, B = lines.tokens, lines.concurrency, lines.max_model_len, lines.block_size
    if tokens is None or C is None or not L:
        return None
    b = B or 16
    # one group: tokens = n x B and C = n / cdiv(L, B), so tokens ~ C x L, within the rounding of C and one block
    lo_tokens, hi_tokens = (C - _CONCURRENCY_HALF_STEP) * L - b, (C + _CONCURRENCY_HALF_STEP) * (L + b)
    if not lo_tokens <= tokens <= hi_tokens:
        return (f"{tokens:,} tokens vs concurrency x max_model_len = {C * L:,.0f}: too far apart for one "
                "KV-cache group, so the model has several (pass --block-size and --kv-cache-groups)")
    if lines.era == "v1-new" and L % b == 0 and tokens % b:
        return (f"{tokens:,} tokens is not a multiple of the block size ({b}{'' if B else ', assumed'}) although "
                f"max_model_len is: not a single-group pool")
    return None


def _kv_cache_groups(lines: _PoolLines, given: int | None, hybrid: bool) -> _Derived[int | None]:
    """G: as given, else one unless the log printed a hybrid line (then unknown). Where one group is taken but the
    token and concurrency lines rule it out, a note says so and G is only what was given."""
    groups = given or (None if hybrid else 1)
    doubt = _one_group_doubt(lines) if groups == 1 else None
    if doubt is not None:
        return _Derived(given, notes=(doubt,))
    return _Derived(groups)


def _blocks_per_request(lines: _PoolLines) -> list[int]:
    """s, the blocks one max_model_len request pins: cdiv(L, B) attention blocks, plus 1 or 2 in each Mamba/GDN
    group (§3.2; both candidates while the Mamba cache mode is unknown). Empty where B, L or G is unknown, or the
    groups are not Mamba/GDN."""
    B, G, L = lines.block_size, lines.groups, lines.max_model_len
    if lines.blocks_per_request:
        return [lines.blocks_per_request]
    if not (B and L and G):
        return []
    if G == 1:
        return [cdiv(L, B)]
    if lines.mamba:
        return [cdiv(L, B) + (G - 1) * m for m in _mamba_blocks_per_request(lines.mamba_cache_mode, lines.spec_tokens)]
    return []


def _block_count_from_old_line(lines: _PoolLines) -> _Derived[int | None]:
    """Before v0.20.1 the token line is (n // G) x B (§6): n is one of G values, and C = n / s singles it out where
    it can."""
    tokens, B, G, C = lines.tokens, lines.block_size, lines.groups, lines.concurrency
    if tokens is None or not B or not G:
        return _Derived(None)
    q, r = divmod(tokens, B)
    if r:
        return _Derived(None, notes=(f"{tokens:,} tokens is not a multiple of block size {B}: the block count is not exact",))
    candidates = list(range(q * G, q * G + G))
    how = f"(n // {G} group{'s' if G > 1 else ''}) x {B} = {tokens:,}" + lines.one_group_how
    per_request = _blocks_per_request(lines) if G > 1 else []
    if C is not None and per_request:
        candidates = [c for c in candidates if any(_prints_as(c / s, C) for s in per_request)]
        how += f", and n / {' or '.join(map(str, sorted(set(per_request))))} blocks per request prints {C:.2f}x"
    n = _unique(candidates)
    if n is None and len(candidates) > 1 and max(candidates) - min(candidates) <= MAX_BLOCK_COUNT_SPREAD * min(candidates):
        lo, hi = min(candidates), max(candidates)
        return _Derived(lo, f"{how}; the lowest of the {len(candidates)} counts it allows ({lo:,}-{hi:,})", notes=(
            f"the printed lines allow {len(candidates)} block counts, {lo:,} to {hi:,} ({how}); servesize takes the "
            f"lowest, at most {(hi - lo) / hi:.3%} below the engine's pool",))
    if n is None:
        return _Derived(None, notes=(f"the printed lines allow {len(set(candidates))} block counts ({how}); not exact",))
    return _Derived(n, how)


def _block_count_from_new_line(lines: _PoolLines) -> _Derived[int | None]:
    """Since v0.20.1 the token line is int(n / s x L), s the blocks one request pins (§6): the n that prints both it
    and the concurrency."""
    tokens, L, C = lines.tokens, lines.max_model_len, lines.concurrency
    if tokens is None or not lines.block_size or not L:
        return _Derived(None)
    per_request = _blocks_per_request(lines)
    candidates: list[int] = []
    for s in per_request:
        # tokens = int(n / s * L): n in [tokens * s / L, (tokens + 1) * s / L)
        lo, hi = math.ceil(tokens * s / L), math.ceil((tokens + 1) * s / L)
        candidates += [c for c in range(lo, hi + 1) if int(c / s * L) == tokens and (C is None or _prints_as(c / s, C))]
    n = _unique(candidates)
    if n is None:
        several = len(set(candidates))
        return _Derived(None, notes=(f"the printed lines allow {several} block counts; not exact",) if several > 1 else ())
    s = next(s for s in per_request if int(n / s * L) == tokens)
    return _Derived(n, f"int(n / {s} blocks per request x {L:,}) = {tokens:,} (v0.20.1+ line, block size {lines.block_size})"
                    + lines.one_group_how)


def _block_count_from_token_line(lines: _PoolLines) -> _Derived[int | None]:
    """n from the token line, by the formula of the log's era."""
    if lines.era in _OLD_TOKEN_LINE_ERAS:
        return _block_count_from_old_line(lines)
    if lines.era == "v1-new":
        return _block_count_from_new_line(lines)
    return _Derived(None)


def _state_groups_from_concurrency(lines: _PoolLines, gpu_blocks: int | None) -> tuple[_PoolLines, tuple[str, ...]]:
    """Several groups given, and nothing in the log says what kind: where reading the extra groups as Mamba/GDN
    state (1-2 blocks per request each) pins exactly one block count that prints both the token line and the
    concurrency, they are taken as state groups (a sliding-window group pins a window's blocks instead, which
    the concurrency would not print); else the lines stay as they were and the pool says what to pass."""
    if (lines.mamba or gpu_blocks is not None or lines.era not in _OLD_TOKEN_LINE_ERAS or not lines.groups_given
            or not lines.groups or lines.groups < 2 or lines.concurrency is None):
        return lines, ()
    as_state = replace(lines, mamba=True)
    found = _block_count_from_old_line(as_state)
    if found.value is None:
        return lines, ()
    return as_state, (f"the {lines.groups - 1} group(s) besides attention are taken as Mamba/GDN state: only then do "
                      f"the token line and the {lines.concurrency:.2f}x concurrency both print from one block count "
                      f"({found.value:,}); pass --mamba-cache-mode to say so outright",)


def _block_count(lines: _PoolLines, gpu_blocks: int | None) -> _Derived[int | None]:
    """n, the pool's blocks: as logged ('# GPU blocks'), else where the token line and the concurrency allow one."""
    if gpu_blocks is not None:
        return _Derived(gpu_blocks, "logged '# GPU blocks'")
    found = _block_count_from_token_line(lines)
    if found.value is not None:
        return found
    missing = [w for w, v in (("the block size", lines.block_size), ("the KV-cache group count", lines.groups)) if not v]
    how = "not inferable exactly from the printed lines" + (f" without {' and '.join(missing)}" if missing and lines.tokens else "")
    return _Derived(None, how, found.notes)


def _v0_pool(lines: _PoolLines, n: int | None) -> _Derived[int | None]:
    """The V0 pool: the logged blocks x the block size (no null block taken off, as V1 takes one, §4.6)."""
    B = lines.block_size
    if n is None or not B:
        return _Derived(None, "unknown: the block size is not printed (pass it)")
    return _Derived(n * B, f"# GPU blocks x block size ({n:,} x {B})")


def _pool_from_block_count(lines: _PoolLines, n: int | None) -> _Derived[int | None] | None:
    """The tokens one request can hold where the block count is pinned: every block but the null block (§4.6), at the
    (attention) block size. None where that is not the pool: no pinned count, or several groups not Mamba/GDN."""
    B, G = lines.block_size, lines.groups
    if n is None or not B or not G:
        return None
    if G == 1:
        return _Derived(max(0, n - 1) * B, f"(num_blocks - 1 null block) x block size = ({n:,} - 1) x {B}" + lines.one_group_how)
    if lines.mamba:
        other = _state_blocks(lines, n)
        if other is not None:
            usable = Derivation().step("usable_kv_tokens", USABLE_KV_TOKENS, block_size=B, num_blocks=n,
                                       other_blocks=other, full_groups=1)
            return _Derived(usable, (f"(num_blocks - 1 null block - {other} state blocks one request pins) x attention "
                                     f"block size = ({n:,} - 1 - {other}) x {B}: one request's attention tokens, as "
                                     "servesize memory derives its usable tokens"))
        return _Derived(max(0, n - 1) * B, (f"(num_blocks - 1) x attention block size = ({n:,} - 1) x {B}: one request's attention "
                                      f"tokens; each request also pins 1-2 blocks in each of the {G - 1} Mamba/GDN group(s)"))
    return _Derived(None, (f"not one number from the log: plan and memory derive it from the {n:,} blocks "
                           f"(--num-gpu-blocks-override) and the model's windows ({G} KV-cache groups that are not "
                           "Mamba/GDN state, so the blocks a request pins depend on windows the log does not print)"))


def _state_blocks(lines: _PoolLines, n: int) -> int | None:
    """The blocks one max_model_len request pins outside the attention group (s - cdiv(L, B)), where exactly one
    per-request block sum s prints the logged concurrency from n blocks; None where that is not known."""
    B, L, C = lines.block_size, lines.max_model_len, lines.concurrency
    if not B or not L:
        return None
    fits = [s for s in _blocks_per_request(lines) if C is None or _prints_as(n / s, C)]
    s = _unique(fits)
    return None if s is None else max(0, s - cdiv(L, B))


def _pool_from_token_line(lines: _PoolLines) -> _Derived[int | None]:
    """The pool where the block count is not pinned: the token line, where the era's formula makes it the pool."""
    tokens, G, C, L = lines.tokens, lines.groups, lines.concurrency, lines.max_model_len
    if tokens is None:
        return _Derived(None, "unknown: no token or block line")
    if lines.era == "unknown":
        return _Derived(None, "unknown: the log formula's era is unknown (print or pass the vLLM version)")
    if G == 1 and lines.era in _OLD_TOKEN_LINE_ERAS:
        return _Derived(tokens, "logged tokens: the pre-v0.20.1 line is num_blocks x block size for one KV-cache group"
                        + lines.one_group_how)
    if G == 1:
        return _Derived(tokens, "logged tokens: since v0.20.1 the line is concurrency x max_model_len, which equals "
                        "num_blocks x block size for one KV-cache group" + lines.one_group_how)
    if lines.era == "v1-hybrid-old" and lines.mamba and G:
        return _Derived(tokens * G, (f"logged tokens x {G} groups: the pre-v0.20.1 line divides the blocks by every group, "
                                     "while Mamba/GDN groups need only 1-2 blocks per request"))
    missing = [flag for flag, known in (("--block-size", lines.block_size), ("--kv-cache-groups", lines.groups_given))
               if not known]
    if lines.era == "v1-new":
        logged = f" ({C} x {L:,})" if C is not None and L is not None else ""
        ask = f"pass {' and '.join(missing)}" if missing else _v1_new_ask(lines)
        return _Derived(None, (f"unknown: since v0.20.1 the token line is concurrency x max_model_len{logged}, not the "
                               f"pool, and with several KV-cache groups the pool depends on them; {ask}"))
    if missing:
        ask = f"pass {' and '.join(missing)} (servesize memory prints the groups)"
    else:  # both given: what is still open is what the groups are (a loop otherwise: the same two flags again)
        ask = ("with the block size and groups given, the lines still fit no single block count as Mamba/GDN state; "
               "pass --mamba-cache-mode if the groups are state groups, or calibrate from a log that prints "
               "'# GPU blocks' or 'Available KV cache memory' (sliding-window groups)")
    return _Derived(None, ("unknown: the pre-v0.20.1 line divides the blocks by every KV-cache group and this model has "
                           f"several; {ask}"))


def _v1_new_ask(lines: _PoolLines) -> str:
    """What is still open once the block size and groups are given (never the flags already passed)."""
    if not lines.mamba:
        open_flags = "--mamba-cache-mode (Mamba/GDN groups)" + ("" if lines.blocks_per_request else
                                                                 " and --blocks-per-request")
        head = ("the groups are not known to be Mamba/GDN state, and a sliding-window pool is not derived from these "
                f"lines: pass {open_flags}")
    elif lines.blocks_per_request:
        head = f"no block count prints both lines with {lines.blocks_per_request} blocks per request"
    else:
        head = ("no single block count prints both lines: pass --num-speculative-tokens (speculative decoding) or "
                "--blocks-per-request (servesize memory --explain prints it)")
    return head + "; plan otherwise sizes from the logged 'Available KV cache memory', where the log has it"


def _under_report_notes(lines: _PoolLines) -> tuple[str, ...]:
    """The pre-v0.20.1 token line divides the blocks by every group (§5.2): say so where C x L shows it."""
    tokens, C, L = lines.tokens, lines.concurrency, lines.max_model_len
    if lines.era == "v1-hybrid-old" and lines.groups != 1 and tokens is not None and C and L and C * L > 1.05 * tokens:
        return (f"the pre-v0.20.1 token line under-reports models with several KV-cache groups: concurrency x "
                f"max_model_len = {C * L:,.0f} vs {tokens:,} logged",)
    return ()


def _pool_tokens(lines: _PoolLines, n: int | None) -> _Derived[int | None]:
    """The real pool in tokens: from the block count where it is pinned, else from the token line where it is the pool."""
    if lines.era == "v0":
        found = _v0_pool(lines, n)
    else:
        found = _pool_from_block_count(lines, n) or _pool_from_token_line(lines)
    return _Derived(found.value, found.how, _under_report_notes(lines))


def _model_loading_gib(facts: LogFacts) -> float | None:
    """The largest 'Model loading took' figure (each worker prints its own)."""
    return max((f.value for f in facts.all("model_loading_gib")), default=None)


def _weights_gib(facts: LogFacts) -> _Derived[float | None]:
    """Weights per GPU: the V0 breakdown or the suggestion line, else 'Model loading took'."""
    weights = facts.value("weights_gib") or (facts.value("suggestion") or {}).get("weights_gib")
    if weights is None:
        weights = _model_loading_gib(facts)
    loading = facts.fact("model_loading_gib")
    notes: tuple[str, ...] = ()
    if loading is not None and re.search(r"took\s+[0-9.]+\s*GB\b", loading.line):
        notes = ("'Loading model weights took X GB': vLLM divided by 2**30, so X is GiB",)
    return _Derived(weights, notes=notes)


def _activation_gib(facts: LogFacts, weights_gib: float | None) -> _Derived[float | None]:
    """Peak activation: as printed, else the V0 profile's peak torch memory less the weights."""
    activation = facts.value("activation_gib") or (facts.value("suggestion") or {}).get("activation_gib")
    profile = facts.value("v0_memory_profile") or {}
    if activation is None and "peak_torch_memory" in profile and weights_gib is not None:
        peak = profile["peak_torch_memory"]
        if peak < weights_gib:  # the peak includes the weights: these two lines are not from one start-up
            return _Derived(None, notes=(f"activation unknown: the V0 peak_torch_memory ({peak} GiB) is below the weights "
                                         f"({weights_gib} GiB) it includes, so the lines disagree",))
        return _Derived(round(peak - weights_gib, 4),
                        notes=("activation = V0 peak_torch_memory - weights (the V0 peak includes the weights)",))
    return _Derived(activation)


def _non_torch_gib(facts: LogFacts) -> _Derived[float | None]:
    """Non-torch memory: as printed, else the suggestion line's 'weights + non-torch' less 'Model loading took'."""
    suggestion = facts.value("suggestion") or {}
    non_torch = facts.value("non_torch_gib") or suggestion.get("non_torch_gib")
    loading = _model_loading_gib(facts)
    if non_torch is None and "weights_plus_non_torch_gib" in suggestion and loading is not None:
        return _Derived(round(suggestion["weights_plus_non_torch_gib"] - loading, 4),
                        notes=("non-torch = suggestion line's 'weights + non-torch' - 'Model loading took'",))
    return _Derived(non_torch)


def _cudagraph_gib(facts: LogFacts) -> float | None:
    """The estimate where the log prints one, else the suggestion line's figure, else the captured size."""
    cudagraph = facts.value("cudagraph_estimate_gib")
    if cudagraph is None:
        cudagraph = (facts.value("suggestion") or {}).get("cudagraph_gib") or facts.value("cudagraph_actual_gib")
    return cudagraph


def _setup_notes(facts: LogFacts) -> tuple[str, ...]:
    """How the server was set up, where it changes what the figures mean."""
    notes = []
    if facts.fact("kv_cache_memory_given"):
        notes.append("the KV memory was given with --kv-cache-memory-bytes (the utilisation budget was skipped)")
    cpu_blocks = facts.value("cpu_blocks")
    if cpu_blocks:
        notes.append(f"# CPU blocks {cpu_blocks:,}: V0 swap space, not part of the GPU pool")
    if facts.cpu_kv_cache_tokens is not None and facts.gpu_kv_cache_tokens is None:
        notes.append("CPU build: 'CPU KV cache size' is the pool in host memory (block size a multiple of 32, default 128)")
    return tuple(notes)


def _model(facts: LogFacts, given: str | None) -> _Derived[str | None]:
    """The model the log is of: as it names it, else as the caller says (a log quoted without vLLM's config line),
    else unknown, and then plan cannot check the calibration against the model it is applied to."""
    logged = facts.value("model")
    if logged:
        ignored = (f"the model given ({clip(given)}) is not used: the log names {clip(logged)}",) \
            if given and given != logged else ()
        return _Derived(logged, notes=ignored)
    if given:
        return _Derived(given, notes=(f"model {clip(given)} as given: the log names none",))
    return _Derived(None, notes=("the log names no model (no vLLM config or 'non-default args' line): plan and "
                                 "memory apply this calibration only with --calibration-mismatch-ok",))


def calibrate(facts: LogFacts, *, block_size: int | None = None, kv_cache_groups: int | None = None,
              blocks_per_request: int | None = None, mamba_cache_mode: str | None = None,
              num_speculative_tokens: int = 0, model: str | None = None) -> Calibration:
    """Turn a start-up's facts into a Calibration.

    ``block_size``, ``kv_cache_groups`` (how many KV-cache groups the model has), ``blocks_per_request``
    (the per-request block sum at max_model_len), ``mamba_cache_mode`` and ``num_speculative_tokens`` (the
    draft tokens per step, each one more state block per request) are what the log does not say for hybrid
    models; give them when you know them (``servesize memory --explain`` prints the groups and the sum),
    and the block count is pinned down where the printed numbers allow exactly one value. ``model`` names the
    model where the log does not (plan refuses to apply a calibration that names none to a model unless told)."""
    era = _era(facts)
    max_model_len = _max_model_len(facts)
    stated_block_size = _stated_block_size(facts, block_size)
    mode = mamba_cache_mode or facts.value("mamba_cache_mode")
    stated = _PoolLines(era=era.value, tokens=_kv_tokens_logged(facts), concurrency=facts.max_concurrency,
                       max_model_len=max_model_len.value, block_size=stated_block_size.value, groups=None,
                       groups_given=bool(kv_cache_groups), mamba=_has_mamba_groups(facts, mode), mamba_cache_mode=mode,
                       blocks_per_request=blocks_per_request, spec_tokens=num_speculative_tokens)
    available = _available_kv_bytes(facts)
    groups = _kv_cache_groups(stated, kv_cache_groups, _looks_hybrid(facts, kv_cache_groups, mamba_cache_mode))
    block = stated_block_size
    if facts.gpu_blocks is not None and block.value is None:
        block = _block_size_from_concurrency(facts.gpu_blocks, facts.max_concurrency, facts.max_concurrency_tokens)
    lines = replace(stated, groups=groups.value, block_size=block.value)
    lines, state_notes = _state_groups_from_concurrency(lines, facts.gpu_blocks)
    count = _block_count(lines, facts.gpu_blocks)
    pool = _pool_tokens(lines, count.value)
    weights = _weights_gib(facts)
    activation = _activation_gib(facts, weights.value)
    non_torch = _non_torch_gib(facts)
    named = _model(facts, model)
    notes = (*facts.notes, *named.notes, *era.notes, *max_model_len.notes, *_rank_notes(facts), *available.notes, *groups.notes,
             *state_notes, *count.notes, *pool.notes, *weights.notes, *activation.notes, *non_torch.notes, *_setup_notes(facts))
    return _possible(Calibration(
        source=facts.source, era=era.value, vllm_version=facts.vllm_version, model=named.value,
        tensor_parallel_size=facts.value("tensor_parallel_size"), max_model_len=max_model_len.value,
        kv_cache_dtype=facts.value("kv_cache_dtype"), gpu_memory_utilization=facts.value("gpu_memory_utilization"),
        quantization=facts.value("quantization"), block_size=block.value, kv_cache_groups=kv_cache_groups,
        available_kv_bytes_per_gpu=available.value, available_kv_gib_logged=facts.available_kv_gib,
        num_blocks=count.value, num_blocks_how=count.how + (f"; block size: {block.how}" if count.value is not None and block.how else ""),
        kv_cache_tokens_logged=lines.tokens, cpu_kv_cache_tokens_logged=facts.cpu_kv_cache_tokens,
        max_concurrency=lines.concurrency, max_concurrency_tokens=facts.max_concurrency_tokens,
        pool_tokens=pool.value, pool_tokens_how=pool.how,
        weights_gib=weights.value, activation_gib=activation.value, non_torch_gib=non_torch.value,
        cudagraph_gib=_cudagraph_gib(facts), total_gpu_memory_gib=facts.value("total_gpu_memory_gib"),
        ranks=facts.ranks, notes=notes,
    ))


def _possible(cal: Calibration) -> Calibration:
    """``cal``, or a refusal when its figures leave the KV cache a memory no start-up could have: the budget
    (total x utilization) less weights, activation peak and non-torch memory is below zero (past the
    two-decimal rounding of the four figures), or the KV memory printed is larger than the GPU."""
    parts = [v for v in (cal.total_gpu_memory_gib, cal.gpu_memory_utilization, cal.weights_gib, cal.activation_gib,
                         cal.non_torch_gib) if v is not None]
    if len(parts) == 5:
        total, util, weights, activation, non_torch = parts
        rest = total * util - weights - activation - non_torch
        if rest < -4 * GIB_HALF_STEP:
            raise BadInput(f"{cal.source}: its figures leave the KV cache {rest:.2f} GiB ({total:g} GiB x {util:g} - weights "
                           f"{weights:g} - activation {activation:g} - non-torch {non_torch:g}): no vLLM start-up prints "
                           "these; is the log edited or two start-ups mixed?")
    logged, gpu = cal.available_kv_gib_logged, cal.total_gpu_memory_gib
    if logged is not None and gpu is not None and logged > gpu + GIB_HALF_STEP:
        raise BadInput(f"{cal.source}: available KV memory {logged:g} GiB is more than the GPU's {gpu:g} GiB; "
                       "is the log edited or two start-ups mixed?")
    return cal



# --------------------------------------------------------------------------------------------
# Prediction vs log
# --------------------------------------------------------------------------------------------


@frozen
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


@frozen
class CalibrationCheck(Record):
    source: str
    checks: tuple[Check, ...]
    notes: tuple[str, ...] = ()

    def get(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)



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
