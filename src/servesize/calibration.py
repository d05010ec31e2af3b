"""Read a real vLLM start-up log; turn what it states into a Calibration.

vLLM prints its memory budget and KV pool at start-up, in wording that changed between
releases (../shared/vllm-kv-sizing.md §2, §5, §6, §9). ``parse_vllm_log`` finds every such
line, whatever prefixes it carries (timestamps, ``(EngineCore_DP0 pid=..)``,
``(VllmWorker rank=0 ..)``, ``(Worker_TP1 pid=..)``, docker-compose ``name  |``, ANSI colours),
reads numbers with thousands separators, keeps per-rank values apart, and, when one file holds
several start-ups, keeps the last one that reached the KV-cache lines (and says so).

``calibrate`` turns those facts into what ``memory``/``plan`` can use: the available KV bytes
per GPU as the interval the two-decimal GiB figure allows, the block count where the printed
numbers pin it down exactly, the logged lines, and a best estimate of the real pool — with a
note on how each was derived, or why it cannot be. ``calibrate_against`` compares a
``MemoryReport`` (servesize's prediction) with a Calibration.

This module reads text it is given; the command (``servesize calibrate``) reads the files.
"""

from __future__ import annotations

import json
import math
import pathlib
import re
from dataclasses import dataclass, fields
from typing import Any, Callable

from servesize.deployment import log_era, parse_version
from servesize.errors import BadInput
from servesize.units import GiB, cdiv

# --------------------------------------------------------------------------------------------
# Lines
# --------------------------------------------------------------------------------------------

# ANSI colour codes, with or without the ESC byte (copies from web pages often lose it).
_ANSI = re.compile(r"(?:\x1b)?\[[0-9;]*m")
# The worker a line came from: (VllmWorker rank=0 pid=..), (Worker_TP3_EP3 pid=..),
# (Worker_PP1_TP0 pid=..), (VllmWorkerProcess pid=..), [rank0]:.
_RANK = re.compile(
    r"\((?:VllmWorker\s+rank=(?P<r>\d+)|Worker_(?P<tag>[A-Z]+\d+(?:_[A-Z]+\d+)*)|VllmWorkerProcess\s+pid=(?P<pid>\d+))"
    r"|\[rank(?P<r2>\d+)\]:",
    re.IGNORECASE,
)
_NUM = r"([0-9]+(?:,[0-9]{3})*(?:\.[0-9]+)?)"


def _n(text: str) -> float:
    return float(text.replace(",", ""))


def _i(text: str) -> int:
    return int(text.replace(",", ""))


@dataclass(frozen=True)
class Fact:
    """One value read from one line of a log."""

    name: str
    value: Any
    line_no: int  # 1-based, in the file as given
    line: str  # the line, ANSI codes removed, surrounding space stripped
    rank: str | None = None  # worker tag ('rank=0', 'TP1', 'TP3_EP3', 'pid=1786'); None for the engine/driver

    def to_dict(self) -> dict:
        return {"name": self.name, "value": self.value, "line_no": self.line_no, "rank": self.rank, "line": self.line}


def _version_facts(m: re.Match) -> dict:
    return {"vllm_version": m.group(1)}


def _config_facts(m: re.Match) -> dict:
    """'Initializing a V1 LLM engine (v0.10.2) with config: model=..., max_seq_len=32768, ...'."""
    text = m.string
    out: dict[str, Any] = {"vllm_version": m.group(1)}
    model = re.search(r"\bmodel='([^']*)'", text)
    if model:
        out["model"] = model.group(1)
    for key, name, conv in (
        ("max_seq_len", "max_model_len", int), ("max_model_len", "max_model_len", int),
        ("tensor_parallel_size", "tensor_parallel_size", int), ("pipeline_parallel_size", "pipeline_parallel_size", int),
        ("data_parallel_size", "data_parallel_size", int), ("block_size", "block_size", int),
        ("gpu_memory_utilization", "gpu_memory_utilization", float),
    ):
        hit = re.search(rf"\b{key}=([0-9.]+)\b", text)
        if hit:
            out[name] = conv(hit.group(1))
    for key in ("kv_cache_dtype", "quantization", "dtype", "enforce_eager", "enable_prefix_caching"):
        hit = re.search(rf"\b{key}=([A-Za-z0-9_.]+)", text)
        if hit:
            value = hit.group(1)
            out[key] = {"True": True, "False": False, "None": None}.get(value, value.replace("torch.", ""))
    return out


def _args_facts(m: re.Match) -> dict:
    """"non-default args: {'model': 'x', 'max_model_len': 131072, 'kv_cache_dtype': 'fp8', ...}"."""
    text = m.group(1)
    out: dict[str, Any] = {}
    for key in ("model", "kv_cache_dtype", "quantization", "dtype", "mamba_cache_mode"):
        hit = re.search(rf"'{key}':\s*'([^']*)'", text)
        if hit:
            out[key] = hit.group(1)
    for key, conv in (("max_model_len", int), ("tensor_parallel_size", int), ("pipeline_parallel_size", int),
                      ("data_parallel_size", int), ("block_size", int), ("max_num_seqs", int),
                      ("max_num_batched_tokens", int), ("gpu_memory_utilization", float),
                      ("kv_cache_memory_bytes", int), ("num_gpu_blocks_override", int)):
        hit = re.search(rf"'{key}':\s*([0-9.]+)", text)
        if hit:
            out[key] = conv(float(hit.group(1))) if conv is int else conv(hit.group(1))
    return out


def _v0_profile_facts(m: re.Match) -> dict:
    """V0 (~0.6): 'Memory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=... kv_cache_size=3.81GiB
    gpu_memory_utilization=0.90'. peak_torch_memory includes the weights (vllm-kv-sizing.md §2.2)."""
    pairs = {k: float(v) for k, v in re.findall(r"(\w+)=([0-9.]+)(?:GiB)?", m.group(1))}
    out: dict[str, Any] = {"v0_memory_profile": pairs}
    if "total_gpu_memory" in pairs:
        out["total_gpu_memory_gib"] = pairs["total_gpu_memory"]
    if "kv_cache_size" in pairs:
        out["available_kv_gib"] = pairs["kv_cache_size"]
    if "non_torch_memory" in pairs:
        out["non_torch_gib"] = pairs["non_torch_memory"]
    if "gpu_memory_utilization" in pairs:
        out["gpu_memory_utilization"] = pairs["gpu_memory_utilization"]
    if "peak_torch_memory" in pairs:
        out["peak_torch_gib"] = pairs["peak_torch_memory"]
    return out


def _suggestion_facts(m: re.Match) -> dict:
    """'Free memory on device (F/T GiB) on startup. Desired GPU memory utilization is (U, R GiB). Actual usage is ...'."""
    text = m.string
    parts: dict[str, Any] = {
        "free_gib": _n(m.group(1)), "total_gib": _n(m.group(2)),
        "gpu_memory_utilization": _n(m.group(3)), "requested_gib": _n(m.group(4)),
    }
    for key, pattern in (("weights_gib", r"([0-9.]+) GiB for weights?\b"),
                         ("weights_plus_non_torch_gib", r"([0-9.]+) GiB for consumed memory \(weights \+ non-torch\)"),
                         ("activation_gib", r"([0-9.]+) GiB for peak activation"),
                         ("non_torch_gib", r"([0-9.]+) GiB for non-torch memory"),
                         ("cudagraph_gib", r"([0-9.]+) GiB for (?:CUDAGraph|[A-Z]PU graph) memory")):
        hit = re.search(pattern, text)
        if hit:
            parts[key] = float(hit.group(1))
    fit = re.findall(r"--kv-cache-memory=(\d+)", text)
    if fit:
        parts["kv_cache_memory_to_fit_bytes"] = int(fit[0])
        if len(fit) > 1:
            parts["kv_cache_memory_to_fill_bytes"] = int(fit[1])
    in_use = re.search(r"Current kv cache memory in use is (\d+) bytes", text)
    if in_use:
        parts["kv_cache_in_use_bytes"] = int(in_use.group(1))
    else:
        in_use = re.search(r"Current kv cache memory in use is ([0-9.]+) GiB", text)
        if in_use:
            parts["kv_cache_in_use_gib"] = float(in_use.group(1))
    out: dict[str, Any] = {"suggestion": parts, "total_gpu_memory_gib": parts["total_gib"],
                           "gpu_memory_utilization": parts["gpu_memory_utilization"]}
    return out


# (name, regex, what to read from a match). A converter returning a dict yields several facts.
_PATTERNS: list[tuple[str, re.Pattern, Callable[[re.Match], Any]]] = [
    ("vllm_version", re.compile(r"vLLM API server version\s+v?([0-9][^\s,]*)"), _version_facts),
    ("config", re.compile(r"Initializing an? (?:V1 )?LLM engine \(v?([^)\s]+)\) with config:"), _config_facts),
    ("args", re.compile(r"non-default args:\s*(\{.*\})"), _args_facts),
    ("max_model_len", re.compile(r"Using max model len\s+" + _NUM), lambda m: _i(m.group(1))),
    ("max_num_batched_tokens", re.compile(r"max_num_batched_tokens=" + _NUM), lambda m: _i(m.group(1))),
    ("mamba_cache_mode", re.compile(r"Mamba cache mode is set to '(\w+)'"), lambda m: m.group(1)),
    ("model_loading_gib", re.compile(r"(?:Model loading took|Loading model weights took)\s+([0-9.]+)\s*(GiB|GB)"),
     lambda m: float(m.group(1))),
    ("gpu_kv_cache_tokens", re.compile(r"GPU KV cache size:\s*" + _NUM + r"\s*tokens"), lambda m: _i(m.group(1))),
    ("cpu_kv_cache_tokens", re.compile(r"CPU KV cache size:\s*" + _NUM + r"\s*tokens"), lambda m: _i(m.group(1))),
    ("max_concurrency", re.compile(r"Maximum concurrency for\s+" + _NUM + r"\s+tokens per request:\s*([0-9.]+)\s*x"),
     lambda m: {"max_concurrency": float(m.group(2)), "max_concurrency_tokens": _i(m.group(1))}),
    ("gpu_blocks", re.compile(r"#?\s*(?:GPU|cuda) blocks:\s*" + _NUM + r"(?:,\s*#?\s*CPU blocks:\s*" + _NUM + r")?"),
     lambda m: {"gpu_blocks": _i(m.group(1)), **({"cpu_blocks": _i(m.group(2))} if m.group(2) else {})}),
    ("available_kv_gib", re.compile(r"Available KV cache memory:\s*([0-9.]+)\s*GiB"), lambda m: float(m.group(1))),
    ("attention_block_size", re.compile(r"Setting attention block size to\s+" + _NUM + r"\s+tokens"),
     lambda m: _i(m.group(1))),
    ("mamba_padding_pct", re.compile(r"Padding mamba page size by\s+([0-9.]+)%"), lambda m: float(m.group(1))),
    ("padding_layers", re.compile(r"Add (\d+) padding layers?, may waste at most ([0-9.]+)% KV cache memory"),
     lambda m: {"padding_layers": int(m.group(1)), "padding_waste_pct": float(m.group(2))}),
    ("forced_block_size", re.compile(r"Forcing kv cache block size to (\d+)"), lambda m: int(m.group(1))),
    ("cudagraph_estimate_gib", re.compile(r"Estimated CUDA graph memory:\s*([0-9.]+)\s*GiB"), lambda m: float(m.group(1))),
    ("cudagraph_profiling", re.compile(
        r"CUDA graph memory profiling is enabled.*?--gpu-memory-utilization=([0-9.]+) is equivalent to "
        r"--gpu-memory-utilization=([0-9.]+) without CUDA graph memory profiling"),
     lambda m: {"cudagraph_profiling": {"enabled": True, "gpu_memory_utilization": float(m.group(1)),
                                        "equivalent_without": float(m.group(2))},
                "gpu_memory_utilization": float(m.group(1))}),
    ("cudagraph_profiling_off", re.compile(
        r"CUDA graph memory profiling is disabled.*?from ([0-9.]+) to ([0-9.]+)"),
     lambda m: {"cudagraph_profiling": {"enabled": False, "gpu_memory_utilization": float(m.group(1)),
                                        "suggested": float(m.group(2))},
                "gpu_memory_utilization": float(m.group(1))}),
    ("cudagraph_actual_gib", re.compile(r"Graph capturing finished in [0-9.]+ secs?, took ([0-9.]+) GiB"),
     lambda m: float(m.group(1))),
    ("cudagraph_pool", re.compile(r"CUDA graph pool memory:\s*([0-9.]+) GiB \(actual\),\s*([0-9.]+) GiB \(estimated\)"),
     lambda m: {"cudagraph_actual_gib": float(m.group(1)), "cudagraph_estimate_gib": float(m.group(2))}),
    ("v0_memory_profile", re.compile(r"Memory profiling results:\s*(.*)"), _v0_profile_facts),
    ("v0_budget", re.compile(
        r"total_gpu_memory \(([0-9.]+)GiB\) x gpu_memory_utilization \(([0-9.]+)\) = ([0-9.]+)GiB"),
     lambda m: {"total_gpu_memory_gib": float(m.group(1)), "gpu_memory_utilization": float(m.group(2)),
                "requested_gib": float(m.group(3))}),
    ("v0_breakdown", re.compile(
        r"model weights take (-?[0-9.]+)GiB; non_torch_memory takes (-?[0-9.]+)GiB; PyTorch activation peak memory "
        r"takes (-?[0-9.]+)GiB; the rest of the memory reserved for KV Cache is (-?[0-9.]+)GiB"),
     lambda m: {"weights_gib": float(m.group(1)), "non_torch_gib": float(m.group(2)),
                "activation_gib": float(m.group(3)), "available_kv_gib": float(m.group(4))}),
    ("suggestion", re.compile(
        r"Free memory on device \(([0-9.]+)/([0-9.]+) GiB\) on startup\. Desired GPU memory utilization is "
        r"\(([0-9.]+), ([0-9.]+) GiB\)"), _suggestion_facts),
    ("kv_cache_memory_given", re.compile(r"reserved ([0-9.]+) GiB memory for KV Cache as specified by kv_cache_memory_bytes"),
     lambda m: {"available_kv_gib": float(m.group(1)), "kv_cache_memory_given": True}),
    ("startup_error", re.compile(
        r"(The model's max seq len \(\d+\) is larger than the maximum number of tokens that can be stored in KV cache"
        r"|To serve at least one request with the models?'s max seq len|No available memory for the cache blocks"
        r"|CUDA out of memory|OutOfMemoryError)"), lambda m: m.group(1)),
]

# Lines that begin a start-up. A new one begins only once the current start-up has reached its
# KV-cache lines, so per-rank and per-engine repeats of these lines stay in one start-up.
_START = re.compile(r"vLLM API server version|Initializing an? (?:V1 )?LLM engine|non-default args:|Model loading took"
                    r"|Loading model weights took|Memory profiling results:|the current vLLM instance can use")
_KV_FACTS = ("gpu_kv_cache_tokens", "cpu_kv_cache_tokens", "gpu_blocks", "available_kv_gib")
# The log line's own source location: 'kv_cache_utils.py:864]' -> 864 (places a log in a version, §0).
_KV_SOURCE_LINE = re.compile(r"kv_cache_utils\.py:(\d+)\]")


def _rank_of(line: str, at: int) -> str | None:
    m = _RANK.search(line[:at])
    if not m:
        return None
    if m.group("r") is not None:
        return f"rank={m.group('r')}"
    if m.group("r2") is not None:
        return f"rank={m.group('r2')}"
    if m.group("tag"):
        return m.group("tag").upper()
    return f"pid={m.group('pid')}"


def _scan_line(line: str, line_no: int) -> list[Fact]:
    out: list[Fact] = []
    for name, pattern, read in _PATTERNS:
        m = pattern.search(line)
        if not m:
            continue
        value = read(m)
        rank = _rank_of(line, m.start())
        if isinstance(value, dict):
            out += [Fact(k, v, line_no, line, rank) for k, v in value.items()]
        else:
            out.append(Fact(name, value, line_no, line, rank))
        if name in ("gpu_kv_cache_tokens", "cpu_kv_cache_tokens"):
            src = _KV_SOURCE_LINE.search(line)
            if src:
                out.append(Fact("kv_cache_utils_line", int(src.group(1)), line_no, line, rank))
            if "Maximum concurrency for" in line:
                out.append(Fact("combined_kv_line", True, line_no, line, rank))
    return out


# --------------------------------------------------------------------------------------------
# LogFacts
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogFacts:
    """What one start-up in a log states, each value with the line it came from."""

    source: str
    facts: tuple[Fact, ...]
    startups: int  # start-ups found in the file
    chosen: int  # 1-based index of the start-up kept
    first_line: int
    last_line: int
    notes: tuple[str, ...] = ()

    # -- access --------------------------------------------------------------------------
    def all(self, name: str) -> list[Fact]:
        return [f for f in self.facts if f.name == name]

    def fact(self, name: str) -> Fact | None:
        """The last fact of that name in the start-up (later lines override earlier ones)."""
        found = self.all(name)
        return found[-1] if found else None

    def value(self, name: str, default: Any = None) -> Any:
        f = self.fact(name)
        return f.value if f is not None else default

    def per_rank(self, name: str) -> dict[str, Any]:
        """Value per worker ('engine' for lines without one; repeats without a tag get '#2', '#3')."""
        out: dict[str, Any] = {}
        for f in self.all(name):
            key = f.rank or "engine"
            if key in out:
                k = 2
                while f"{key}#{k}" in out:
                    k += 1
                key = f"{key}#{k}"
            out[key] = f.value
        return out

    def minimum(self, name: str) -> Any:
        """The pool is the minimum over ranks (vLLM takes the min of every worker's block count)."""
        values = [f.value for f in self.all(name)]
        return min(values) if values else None

    def min_fact(self, name: str) -> Fact | None:
        found = self.all(name)
        return min(found, key=lambda f: f.value) if found else None

    # -- named facts -----------------------------------------------------------------------
    @property
    def vllm_version(self) -> str | None:
        return self.value("vllm_version")

    @property
    def gpu_kv_cache_tokens(self) -> int | None:
        return self.minimum("gpu_kv_cache_tokens")

    @property
    def cpu_kv_cache_tokens(self) -> int | None:
        return self.minimum("cpu_kv_cache_tokens")

    @property
    def max_concurrency(self) -> float | None:
        return self.minimum("max_concurrency")

    @property
    def max_concurrency_tokens(self) -> int | None:
        return self.value("max_concurrency_tokens")

    @property
    def available_kv_gib(self) -> float | None:
        return self.minimum("available_kv_gib")

    @property
    def gpu_blocks(self) -> int | None:
        return self.minimum("gpu_blocks")

    @property
    def ranks(self) -> tuple[str, ...]:
        return tuple(sorted({f.rank for f in self.facts if f.rank}))

    @property
    def era(self) -> str:
        return _era(self)[0]

    def to_dict(self) -> dict:
        return {"source": self.source, "startups": self.startups, "chosen": self.chosen,
                "lines": [self.first_line, self.last_line], "era": self.era, "notes": list(self.notes),
                "facts": [f.to_dict() for f in self.facts]}


def parse_vllm_log(text: str, source: str = "<log>") -> LogFacts:
    """Every fact of the last start-up in ``text`` that reached its KV-cache lines.

    Raises BadInput when no start-up in the text has a KV-cache line (GPU/CPU KV cache size,
    '# GPU blocks', 'Available KV cache memory' or a V0 budget)."""
    if not isinstance(text, str):
        raise BadInput(f"{source}: expected text, got {type(text).__name__}")
    segments: list[list[Fact]] = [[]]
    bounds: list[list[int]] = [[1, 1]]
    has_kv = False
    lines = text.split("\n")
    for no, raw in enumerate(lines, start=1):
        line = _ANSI.sub("", raw).replace("\r", " ").strip()
        if not line:
            continue
        if has_kv and _START.search(line):
            segments.append([])
            bounds.append([no, no])
            has_kv = False
        found = _scan_line(line, no)
        segments[-1] += found
        bounds[-1][1] = no
        if any(f.name in _KV_FACTS for f in found):
            has_kv = True
    reached = [i for i, seg in enumerate(segments) if any(f.name in _KV_FACTS for f in seg)]
    if not reached:
        raise BadInput(
            f"{source}: no KV-cache lines found ('GPU KV cache size', '# GPU blocks', 'Available KV cache memory'); "
            "pass the log of a vLLM server start-up, from launch until it prints those lines"
        )
    ok = [i for i in reached if not any(f.name == "startup_error" for f in segments[i])]
    pick = ok[-1] if ok else reached[-1]
    notes = []
    if len(reached) > 1:
        notes.append(f"{len(reached)} start-ups reached the KV-cache lines in this file; using "
                     f"{'the last one' if pick == reached[-1] else 'the last one that did not fail'} "
                     f"(lines {bounds[pick][0]}-{bounds[pick][1]})")
    later_failed = [i for i in reached if i > pick]
    if later_failed:
        notes.append(f"{len(later_failed)} later start-up(s) failed after their KV-cache lines "
                     f"(from line {bounds[later_failed[0]][0]}); ignored")
    if pick != len(segments) - 1 and not later_failed:
        notes.append(f"a later start-up (from line {bounds[-1][0]}) stopped before its KV-cache lines; it is ignored")
    chosen = segments[pick]
    errors = [f for f in chosen if f.name == "startup_error"]
    if errors:
        notes.append(f"this start-up then failed (line {errors[0].line_no}): {errors[0].line[:160]}")
    return LogFacts(source, tuple(chosen), len(reached), reached.index(pick) + 1, bounds[pick][0], bounds[pick][1],
                    tuple(notes))


# --------------------------------------------------------------------------------------------
# Era
# --------------------------------------------------------------------------------------------

ERAS = ("v0", "v1-uniform", "v1-hybrid-old", "v1-new")


def _era(facts: LogFacts) -> tuple[str, str]:
    """Which log formula the start-up used, and how that was decided (vllm-kv-sizing.md §6)."""
    has_tokens = facts.fact("gpu_kv_cache_tokens") or facts.fact("cpu_kv_cache_tokens")
    if facts.fact("gpu_blocks") and not has_tokens:
        return "v0", "'# GPU blocks' line (V0 engine, or V1 before v0.8)"
    if facts.fact("combined_kv_line"):
        return "v1-new", "one combined 'KV cache size ..., Maximum concurrency ...' line (v0.20.1+)"
    version = facts.vllm_version
    if version:
        try:
            v = parse_version(version)
        except BadInput:
            v = None
        if v is not None:
            era = log_era(v)
            if era == "v0" and has_tokens:
                era = "v1-uniform"  # a V1 build of 0.7.3 prints tokens already (PR #13596)
            return era, f"vLLM {version}"
    if facts.fact("cudagraph_profiling"):
        return "v1-new", "the CUDA-graph profiling message (default since v0.21)"
    if any(f.rank and f.rank.startswith("rank=") for f in facts.all("gpu_kv_cache_tokens")):
        return "v1-uniform", "the token line is printed per worker (v0.8.x)"
    src = facts.value("kv_cache_utils_line")
    if src is not None:
        if src < 700:
            return "v1-uniform", f"kv_cache_utils.py:{src} (v0.8-0.9 layout)"
        if src < 1800:
            return "v1-hybrid-old", f"kv_cache_utils.py:{src} (v0.10-v0.20 layout)"
        return "v1-new", f"kv_cache_utils.py:{src} (v0.20.1+ layout)"
    return "unknown", "no version line, and nothing else that places the log in a release"


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
    def from_dict(cls, data: dict) -> "Calibration":
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

    def save(self, path: str | pathlib.Path) -> None:
        pathlib.Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | pathlib.Path) -> "Calibration":
        found = load_calibrations(path)
        if len(found) != 1:
            raise BadInput(f"{path} holds {len(found)} calibrations; use load_calibrations()")
        return found[0]


def save_calibrations(calibrations: list[Calibration] | tuple[Calibration, ...], path: str | pathlib.Path) -> None:
    """One calibration is written as one object; several as {"calibrations": [...]}."""
    data = calibrations[0].to_dict() if len(calibrations) == 1 else {"calibrations": [c.to_dict() for c in calibrations]}
    pathlib.Path(path).write_text(json.dumps(data, indent=2) + "\n")


def load_calibrations(path: str | pathlib.Path) -> tuple[Calibration, ...]:
    try:
        data = json.loads(pathlib.Path(path).read_text())
    except OSError as exc:
        raise BadInput(f"cannot read calibration {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise BadInput(f"{path} is not JSON ({exc.msg} at line {exc.lineno})") from None
    if isinstance(data, dict) and "calibrations" in data:
        return tuple(Calibration.from_dict(d) for d in data["calibrations"])
    return (Calibration.from_dict(data),)


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
    era, era_how = _era(facts)
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

    def render(self, explain: bool = False) -> str:
        rows = [f"servesize prediction vs {self.source}"]
        for c in self.checks:
            logged = f"[{c.logged[0]:,.0f}, {c.logged[1]:,.0f})" if isinstance(c.logged, tuple) else f"{c.logged:,}"
            pct = f" ({c.error_pct:+.2f}%)" if c.error_pct is not None else ""
            rows.append(f"  {c.name:<28} predicted {c.predicted:,}  logged {logged}  error {c.error:+,}{pct} {c.unit}")
        rows += [f"  note: {n}" for n in self.notes]
        return "\n".join(rows)


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


__all__ = ["Fact", "LogFacts", "parse_vllm_log", "Calibration", "calibrate", "calibrate_against", "CalibrationCheck",
           "Check", "gib_interval", "save_calibrations", "load_calibrations", "ERAS"]
