"""Read a real vLLM start-up log: every line that states a memory or KV-cache fact.

vLLM prints its memory budget and KV pool at start-up, in wording that changed between
releases (vllm/v1/worker/gpu_worker.py ``determine_available_memory`` and
vllm/v1/core/kv_cache_utils.py ``update_kv_cache_capacity`` in vLLM 0.32, ``_report_kv_cache_config`` in
0.19-0.20; real lines are quoted with their sources in tests/fixtures/vllm-logs-public.json). ``parse_vllm_log`` finds every such
line, whatever prefixes it carries (timestamps, ``(EngineCore_DP0 pid=..)``,
``(VllmWorker rank=0 ..)``, ``(Worker_TP1 pid=..)``, docker-compose ``name  |``, ANSI colours),
reads numbers with thousands separators, keeps per-rank values apart, and, when one file holds
several start-ups, keeps the last one that reached the KV-cache lines (and says so).

This module reads text it is given; the command (``servesize calibrate``) reads the files.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from servesize.engine.versions import log_era, parse_version
from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.jsonable import Record
from servesize.limits import MAX_LOG_LINE_CHARS, MAX_LOG_NUMBER


class _Lazy:
    """A regular expression compiled on its first use: a command that reads no log (fit, plan, memory) does not
    compile the ~35 below at import."""

    __slots__ = ("_args", "_compiled")

    def __init__(self, *args: Any):
        self._args = args
        self._compiled: re.Pattern | None = None

    def _get(self) -> re.Pattern:
        if self._compiled is None:
            self._compiled = re.compile(*self._args)
        return self._compiled

    def search(self, text: str) -> re.Match | None:
        return self._get().search(text)

    def sub(self, repl: str, text: str) -> str:
        return self._get().sub(repl, text)


_lazy = _Lazy


# --------------------------------------------------------------------------------------------
# Lines
# --------------------------------------------------------------------------------------------

# ANSI colour codes, with or without the ESC byte (copies from web pages often lose it).
_ANSI = _lazy(r"(?:\x1b)?\[[0-9;]*m")
_HAS_ANSI = _lazy(r"\[[0-9;]*m")  # whether a line has one: the same codes, found at their '[' (the search is 6x faster)
# The worker a line came from: (VllmWorker rank=0 pid=..), (Worker_TP3_EP3 pid=..),
# (Worker_PP1_TP0 pid=..), (VllmWorkerProcess pid=..), [rank0]:.
_RANK = _lazy(
    r"\((?:VllmWorker\s+rank=(?P<r>\d+)|Worker_(?P<tag>[A-Z]+\d+(?:_[A-Z]+\d+)*)|VllmWorkerProcess\s+pid=(?P<pid>\d+))"
    r"|\[rank(?P<r2>\d+)\]:",
    re.IGNORECASE,
)
_NUM = r"([0-9]+(?:,[0-9]{3})*(?:\.[0-9]+)?)"




class _Malformed(ValueError):
    """A number in a matched line that cannot be what vLLM printed (refused with the line: exit 2)."""


def _n(text: str) -> float:
    try:
        x = float(text.replace(",", ""))
    except ValueError:
        raise _Malformed(f"{text[:40]!r} is not a number") from None
    if not math.isfinite(x) or abs(x) > MAX_LOG_NUMBER:
        raise _Malformed(f"{text[:40]!r} is past any figure vLLM prints ({MAX_LOG_NUMBER:g})")
    return x


def _i(text: str) -> int:
    """A count as vLLM prints it (``290,864``; ``16.0`` reads as 16); a fraction is refused."""
    x = _n(text)
    if not x.is_integer():
        raise _Malformed(f"{text[:40]!r} is not a whole number")
    return int(x)


def _not_negative(value: float, what: str) -> float:
    if value < 0:
        raise _Malformed(f"{what} {value:g} GiB is negative")
    return value


@frozen
class Fact(Record):
    """One value read from one line of a log."""

    name: str
    value: Any
    line_no: int  # 1-based, in the file as given
    line: str  # the line, ANSI codes removed, surrounding space stripped
    rank: str | None = None  # worker tag ('rank=0', 'TP1', 'TP3_EP3', 'pid=1786'); None for the engine/driver


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
            out[name] = _i(hit.group(1)) if conv is int else _n(hit.group(1))
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
            out[key] = _i(hit.group(1)) if conv is int else _n(hit.group(1))
    return out


def _v0_profile_facts(m: re.Match) -> dict:
    """V0 (~0.6): 'Memory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=... kv_cache_size=3.81GiB
    gpu_memory_utilization=0.90'. peak_torch_memory includes the weights (vllm-kv-sizing.md §2.2)."""
    pairs = {k: _n(v) for k, v in re.findall(r"(\w+)=([0-9.]+)(?:GiB)?", m.group(1))}
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
            parts[key] = _n(hit.group(1))
    fit = re.findall(r"--kv-cache-memory=(\d+)", text)
    if fit:
        parts["kv_cache_memory_to_fit_bytes"] = _i(fit[0])
        if len(fit) > 1:
            parts["kv_cache_memory_to_fill_bytes"] = _i(fit[1])
    in_use = re.search(r"Current kv cache memory in use is (\d+) bytes", text)
    if in_use:
        parts["kv_cache_in_use_bytes"] = _i(in_use.group(1))
    else:
        in_use = re.search(r"Current kv cache memory in use is ([0-9.]+) GiB", text)
        if in_use:
            parts["kv_cache_in_use_gib"] = _n(in_use.group(1))
    out: dict[str, Any] = {"suggestion": parts, "total_gpu_memory_gib": parts["total_gib"],
                           "gpu_memory_utilization": parts["gpu_memory_utilization"]}
    return out


# (name, needle, regex, what to read from a match). A converter returning a dict yields several facts. The needle
# is text every match contains (or a tuple: one of them), checked against each pattern and every public log line
# by tests/test_vllm_log_stream.py: a line without it is not searched, so a log of millions of debug lines is read
# in seconds, not minutes.
_PATTERNS: list[tuple[str, str | tuple[str, ...], _Lazy, Callable[[re.Match], Any]]] = [
    ("vllm_version", "vLLM API server version", _lazy(r"vLLM API server version\s+v?([0-9][^\s,]*)"), _version_facts),
    ("config", "LLM engine", _lazy(r"Initializing an? (?:V1 )?LLM engine \(v?([^)\s]+)\) with config:"), _config_facts),
    ("args", "non-default args:", _lazy(r"non-default args:\s*(\{.*\})"), _args_facts),
    ("max_model_len", "Using max model len", _lazy(r"Using max model len\s+" + _NUM), lambda m: _i(m.group(1))),
    ("max_num_batched_tokens", "_num_batched_tokens=", _lazy(r"max_num_batched_tokens=" + _NUM), lambda m: _i(m.group(1))),
    ("mamba_cache_mode", "Mamba cache mode is set to", _lazy(r"Mamba cache mode is set to '(\w+)'"), lambda m: m.group(1)),
    ("model_loading_gib", ("Model loading took", "Loading model weights took"),
     _lazy(r"(?:Model loading took|Loading model weights took)\s+([0-9.]+)\s*(GiB|GB)"),
     lambda m: _n(m.group(1))),
    ("gpu_kv_cache_tokens", "GPU KV cache size:", _lazy(r"GPU KV cache size:\s*" + _NUM + r"\s*tokens"), lambda m: _i(m.group(1))),
    ("cpu_kv_cache_tokens", "CPU KV cache size:", _lazy(r"CPU KV cache size:\s*" + _NUM + r"\s*tokens"), lambda m: _i(m.group(1))),
    ("max_concurrency", "Maximum concurrency for", _lazy(r"Maximum concurrency for\s+" + _NUM + r"\s+tokens per request:\s*([0-9.]+)\s*x"),
     lambda m: {"max_concurrency": _n(m.group(2)), "max_concurrency_tokens": _i(m.group(1))}),
    ("gpu_blocks", "blocks:", _lazy(r"#?\s*(?:GPU|cuda) blocks:\s*" + _NUM + r"(?:,\s*#?\s*CPU blocks:\s*" + _NUM + r")?"),
     lambda m: {"gpu_blocks": _i(m.group(1)), **({"cpu_blocks": _i(m.group(2))} if m.group(2) else {})}),
    ("available_kv_gib", "Available KV cache memory:", _lazy(r"Available KV cache memory:\s*([0-9.]+)\s*GiB"), lambda m: _n(m.group(1))),
    ("attention_block_size", "Setting attention block size to", _lazy(r"Setting attention block size to\s+" + _NUM + r"\s+tokens"),
     lambda m: _i(m.group(1))),
    ("mamba_padding_pct", "Padding mamba page size by", _lazy(r"Padding mamba page size by\s+([0-9.]+)%"), lambda m: _n(m.group(1))),
    ("padding_layers", "padding layer", _lazy(r"Add (\d+) padding layers?, may waste at most ([0-9.]+)% KV cache memory"),
     lambda m: {"padding_layers": _i(m.group(1)), "padding_waste_pct": _n(m.group(2))}),
    ("forced_block_size", "Forcing kv cache block size to", _lazy(r"Forcing kv cache block size to (\d+)"), lambda m: _i(m.group(1))),
    ("cudagraph_estimate_gib", "Estimated CUDA graph memory:",
     _lazy(r"Estimated CUDA graph memory:\s*([0-9.]+)\s*GiB"), lambda m: _n(m.group(1))),
    ("cudagraph_profiling", "CUDA graph memory profiling is enabled", _lazy(
        r"CUDA graph memory profiling is enabled.*?--gpu-memory-utilization=([0-9.]+) is equivalent to "
        r"--gpu-memory-utilization=([0-9.]+) without CUDA graph memory profiling"),
     lambda m: {"cudagraph_profiling": {"enabled": True, "gpu_memory_utilization": _n(m.group(1)),
                                        "equivalent_without": _n(m.group(2))},
                "gpu_memory_utilization": _n(m.group(1))}),
    ("cudagraph_profiling_off", "CUDA graph memory profiling is disabled", _lazy(
        r"CUDA graph memory profiling is disabled.*?from ([0-9.]+) to ([0-9.]+)"),
     lambda m: {"cudagraph_profiling": {"enabled": False, "gpu_memory_utilization": _n(m.group(1)),
                                        "suggested": _n(m.group(2))},
                "gpu_memory_utilization": _n(m.group(1))}),
    ("cudagraph_actual_gib", "Graph capturing finished in", _lazy(r"Graph capturing finished in [0-9.]+ secs?, took ([0-9.]+) GiB"),
     lambda m: _n(m.group(1))),
    ("cudagraph_pool", "CUDA graph pool memory:",
     _lazy(r"CUDA graph pool memory:\s*([0-9.]+) GiB \(actual\),\s*([0-9.]+) GiB \(estimated\)"),
     lambda m: {"cudagraph_actual_gib": _n(m.group(1)), "cudagraph_estimate_gib": _n(m.group(2))}),
    ("v0_memory_profile", "Memory profiling results:", _lazy(r"Memory profiling results:\s*(.*)"), _v0_profile_facts),
    ("v0_budget", "GiB) x gpu_memory_utilization (", _lazy(
        r"total_gpu_memory \(([0-9.]+)GiB\) x gpu_memory_utilization \(([0-9.]+)\) = ([0-9.]+)GiB"),
     lambda m: {"total_gpu_memory_gib": _n(m.group(1)), "gpu_memory_utilization": _n(m.group(2)),
                "requested_gib": _n(m.group(3))}),
    ("v0_breakdown", "PyTorch activation peak memory", _lazy(
        r"model weights take (-?[0-9.]+)GiB; non_torch_memory takes (-?[0-9.]+)GiB; PyTorch activation peak memory "
        r"takes (-?[0-9.]+)GiB; the rest of the memory reserved for KV Cache is (-?[0-9.]+)GiB"),
     lambda m: {"weights_gib": _not_negative(_n(m.group(1)), "model weights"), "non_torch_gib": _n(m.group(2)),
                "activation_gib": _not_negative(_n(m.group(3)), "PyTorch activation peak memory"),
                "available_kv_gib": _not_negative(_n(m.group(4)), "the memory reserved for KV Cache")}),
    ("suggestion", "Free memory on device (", _lazy(
        r"Free memory on device \(([0-9.]+)/([0-9.]+) GiB\) on startup\. Desired GPU memory utilization is "
        r"\(([0-9.]+), ([0-9.]+) GiB\)"), _suggestion_facts),
    ("kv_cache_memory_given", "KV Cache as specified by kv_cache_memory_bytes",
     _lazy(r"reserved ([0-9.]+) GiB memory for KV Cache as specified by kv_cache_memory_bytes"),
     lambda m: {"available_kv_gib": _n(m.group(1)), "kv_cache_memory_given": True}),
    ("startup_error", ("max seq len", "No available memory",
                       "CUDA out of memory", "OutOfMemoryError"), _lazy(
        r"(The model's max seq len \(\d+\) is larger than the maximum number of tokens that can be stored in KV cache"
        r"|To serve at least one request with the models?'s max seq len|No available memory for the cache blocks"
        r"|CUDA out of memory|OutOfMemoryError)"), lambda m: m.group(1)),
]

# Lines that begin a start-up. A new one begins only once the current start-up has reached its
# KV-cache lines, so per-rank and per-engine repeats of these lines stay in one start-up.
_START = _lazy(r"vLLM API server version|Initializing an? (?:V1 )?LLM engine|non-default args:|Model loading took"
                    r"|Loading model weights took|Memory profiling results:|the current vLLM instance can use")
# Text every line _START matches contains (one of them).
_START_NEEDLES = ("vLLM API server version", "LLM engine", "non-default args:", "Model loading took",
                  "Loading model weights took", "Memory profiling results:", "vLLM instance can use")
# Short text at least one of which every needle (of _PATTERNS and _START) contains: a line with none of these
# neither starts a start-up nor states a fact. Plain `in` tests, because one regex alternating the needles costs
# about 4 us a line (its first characters are common letters), twice these on 200,000 debug lines
# (tests/test_vllm_log_stream.py checks that they cover every needle).
_ANCHORS = ("LLM", "args:", "took", "emory", "max model len", "batched", "Mamba", "KV cache", "KV Cache", "concurrency",
            "blocks:", "block size", "page size", "padding layer", "CUDA graph", "Graph capturing", "max seq len")


def _may_state_a_fact(line: str) -> bool:
    for anchor in _ANCHORS:
        if anchor in line:
            return True
    return False


_KV_FACTS = ("gpu_kv_cache_tokens", "cpu_kv_cache_tokens", "gpu_blocks", "available_kv_gib")
# The log line's own source location: 'kv_cache_utils.py:864]' -> 864 (places a log in a version, §0).
_KV_SOURCE_LINE = _lazy(r"kv_cache_utils\.py:(\d+)\]")


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
    for name, needle, pattern, read in _PATTERNS:
        if (needle not in line) if isinstance(needle, str) else not any(n in line for n in needle):
            continue
        m = pattern.search(line)
        if not m:
            continue
        try:
            value = read(m)
        except _Malformed as exc:
            raise BadInput(f"line {line_no}: {exc} in this {name.replace('_', ' ')} line: {line[:120]}") from None
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


@frozen
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
        repeats: dict[str, int] = {}  # tag -> the next '#k' it takes: linear in the lines, however many repeat
        for f in self.all(name):
            key = f.rank or "engine"
            if key in out:
                k = repeats.get(key, 2)
                while f"{key}#{k}" in out:  # only a tag spelled '#k' in the log itself is skipped here
                    k += 1
                repeats[key] = k + 1
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
        return era_of(self)[0]

    def to_dict(self) -> dict:
        return {"source": self.source, "startups": self.startups, "chosen": self.chosen,
                "lines": [self.first_line, self.last_line], "era": self.era, "notes": list(self.notes),
                "facts": [f.to_dict() for f in self.facts]}


def parse_vllm_log(text: str | Iterator[str], source: str = "<log>") -> LogFacts:
    """Every fact of the last start-up in ``text`` that reached its KV-cache lines. ``text`` is the log, or its
    lines as they are read (``servesize.limits.input_lines``: a file is never held whole).

    Raises BadInput when no start-up in the text has a KV-cache line (GPU/CPU KV cache size,
    '# GPU blocks', 'Available KV cache memory' or a V0 budget)."""
    if isinstance(text, str):
        lines: Iterable[str] = text.split("\n")
    elif isinstance(text, Iterator):
        lines = text
    else:
        raise BadInput(f"{source}: expected text, got {type(text).__name__}")
    segments, bounds = _startups(lines, source)
    reached = [i for i, seg in enumerate(segments) if any(f.name in _KV_FACTS for f in seg)]
    if not reached:
        raise BadInput(
            f"{source}: no KV-cache lines found ('GPU KV cache size', '# GPU blocks', 'Available KV cache memory'); "
            "pass the log of a vLLM server start-up, from launch until it prints those lines"
        )
    ok = [i for i in reached if not any(f.name == "startup_error" for f in segments[i])]
    pick = ok[-1] if ok else reached[-1]
    notes = _choice_notes(segments, bounds, reached, pick)
    return LogFacts(source, tuple(segments[pick]), len(reached), reached.index(pick) + 1, bounds[pick][0],
                    bounds[pick][1], tuple(notes))


def _startups(lines: Iterable[str], source: str) -> tuple[list[list[Fact]], list[list[int]]]:
    """The facts of each start-up in the text and its [first, last] line: a start line after KV-cache lines
    begins the next one."""
    segments: list[list[Fact]] = [[]]
    bounds: list[list[int]] = [[1, 1]]
    has_kv = False
    may, has_ansi = _may_state_a_fact, _HAS_ANSI._get().search  # bound once: this loop may see millions of lines
    for no, raw in enumerate(lines, start=1):
        raw = raw[:MAX_LOG_LINE_CHARS]
        if not may(raw) and not (has_ansi(raw) and may(_ANSI.sub("", raw))):
            if raw.strip():  # a line that says nothing servesize reads: only the start-up's extent moves
                bounds[-1][1] = no
            continue
        line = _ANSI.sub("", raw).replace("\r", " ").strip()
        if not line:
            continue
        if has_kv and _START.search(line):
            segments.append([])
            bounds.append([no, no])
            has_kv = False
        try:
            found = _scan_line(line, no)
        except BadInput as exc:
            raise BadInput(f"{source}: {exc}") from None
        segments[-1] += found
        bounds[-1][1] = no
        if any(f.name in _KV_FACTS for f in found):
            has_kv = True
    return segments, bounds


def _choice_notes(segments: list[list[Fact]], bounds: list[list[int]], reached: list[int], pick: int) -> list[str]:
    """Which start-up was used when the file holds several, what became of the others, and whether it then failed."""
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
    errors = [f for f in segments[pick] if f.name == "startup_error"]
    if errors:
        notes.append(f"this start-up then failed (line {errors[0].line_no}): {errors[0].line[:160]}")
    return notes


# --------------------------------------------------------------------------------------------
# Era
# --------------------------------------------------------------------------------------------

ERAS = ("v0", "v1-uniform", "v1-hybrid-old", "v1-new")


def era_of(facts: LogFacts) -> tuple[str, str]:
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
