"""What the engine says about itself: a scrape of vLLM's Prometheus ``/metrics``.

Read (summed over label sets, i.e. over engines when data-parallel):

- prefix-cache queries and hits, in tokens: ``vllm:prefix_cache_queries_total`` /
  ``vllm:prefix_cache_hits_total`` (vLLM v1); older releases: ``vllm:gpu_prefix_cache_queries_total`` /
  ``vllm:gpu_prefix_cache_hits_total``
- preemptions: ``vllm:num_preemptions_total``
- KV usage gauge (0..1): ``vllm:kv_cache_usage_perc``, older ``vllm:gpu_cache_usage_perc`` (max over engines)
- the scheduler's queue: ``vllm:num_requests_running`` and ``vllm:num_requests_waiting`` (gauges, summed over
  engines; vllm/v1/metrics/loggers.py), sampled during a rung by ``GaugeSampler``
- ``vllm:cache_config_info``: its labels (``num_gpu_blocks``, ``block_size``, ``cache_dtype``, ...);
  ``num_gpu_blocks x block_size`` is the engine's own pool figure, per engine.

A missing endpoint or a missing series is a note, never an error: the measurement goes on with the
next signal.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from dataclasses import dataclass, field

import aiohttp

from servesize.errors import clip
from servesize.frozen import frozen
from servesize.jsonable import Record, json_as

QUERIES = ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries",
           "vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries")
HITS = ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits",
        "vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits")
PREEMPTIONS = ("vllm:num_preemptions_total", "vllm:num_preemptions")
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
RUNNING = ("vllm:num_requests_running",)
WAITING = ("vllm:num_requests_waiting",)
# How often a rung samples each endpoint's gauges (KV usage, running, waiting): often enough to see a rung's
# peak queue on a ladder of minutes-long rungs, rarely enough to cost the server nothing (one /metrics a second)
GAUGE_SAMPLE_S = 1.0
CACHE_CONFIG = "vllm:cache_config_info"

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')


# the text format's three label-value escapes (prometheus.io/docs/instrumenting/exposition_formats: "\\", "\"" and
# "\n"); any other backslash is itself. Python's unicode_escape, used before, raised on "\x" or "\N{...}" (a
# server's label was a crash) and turned UTF-8 label text into mojibake
_ESCAPE = re.compile(r'\\([\\"n])')
_UNESCAPED = {"\\": "\\", '"': '"', "n": "\n"}


def _label_value(raw: str) -> str:
    return _ESCAPE.sub(lambda m: _UNESCAPED[m.group(1)], raw) if "\\" in raw else raw


def parse_prometheus(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus text exposition -> {metric name: [(labels, value), ...]}; unreadable lines are skipped."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        name, labels, value = m.groups()
        try:
            v = float(value)
        except ValueError:
            continue
        lab = {k: _label_value(val) for k, val in _LABEL.findall(labels or "")}
        out.setdefault(name, []).append((lab, v))
    return out


def _first(series: dict, names: tuple[str, ...]) -> tuple[str | None, list]:
    for n in names:
        if n in series:
            return n, series[n]
    return None, []


@dataclass
class MetricsSnapshot(Record):
    t_ns: int = field(metadata=json_as(None))
    prefix_queries: float | None = None
    prefix_hits: float | None = None
    preemptions: float | None = None
    kv_usage: float | None = None
    running: float | None = None
    waiting: float | None = None
    cache_config: dict | None = None
    engines: int = 1
    refused: str | None = field(default=None, metadata=json_as(None))  # why cache_config_info was refused (an impossible label), else None
    names: dict = field(default_factory=dict)  # which series name answered for each quantity

    @property
    def block_size(self) -> int | None:
        return _int_label(self.cache_config, "block_size")

    @property
    def num_gpu_blocks(self) -> int | None:
        return _int_label(self.cache_config, "num_gpu_blocks")

    @property
    def engine_pool_tokens(self) -> int | None:
        """num_gpu_blocks x block_size, per engine, as cache_config_info publishes it."""
        if self.num_gpu_blocks is None or self.block_size is None:
            return None
        return self.num_gpu_blocks * self.block_size


# The largest cache_config_info figure taken: a block of more tokens, or a pool of more blocks, is no engine's
# (vLLM's block sizes are 1..a few hundred tokens; 2**40 blocks would be petabytes of KV cache)
MAX_CONFIG_LABEL = 2**40
CONFIG_LABELS = ("block_size", "num_gpu_blocks")


def _int_label(labels: dict | None, key: str) -> int | None:
    """A cache_config_info label as a whole number in [1, MAX_CONFIG_LABEL], else None (absent or impossible)."""
    if not labels:
        return None
    try:
        v = float(labels.get(key, ""))
    except ValueError:
        return None
    if not math.isfinite(v) or not v.is_integer() or not 1 <= v <= MAX_CONFIG_LABEL:
        return None
    return int(v)


def _impossible_config(labels: dict) -> str | None:
    """Why a cache_config_info label that is present is no possible figure (inf, 1e400, 0, -16, 2.5), or None."""
    for key in CONFIG_LABELS:
        raw = labels.get(key)
        if raw is None or raw == "None":
            continue
        if _int_label(labels, key) is None:
            return (f"vllm:cache_config_info label {key}={clip(raw)} is not a whole number in 1..{MAX_CONFIG_LABEL} "
                    f"(an impossible figure): the engine's own pool figure and block size are not used")
    return None


def _count(values: list[float], combine=sum) -> float | None:
    """The series' figure (counts and gauges alike are finite and never negative): None when a sample is NaN,
    infinite or negative (Prometheus's text allows all three), or the figure itself overflows: no figure, as when
    the series is absent, never a NaN carried into a hit ratio."""
    if not values or not all(math.isfinite(v) and v >= 0 for v in values):
        return None
    out = float(combine(values))
    return out if math.isfinite(out) else None


def snapshot_from_text(text: str, t_ns: int | None = None) -> MetricsSnapshot:
    series = parse_prometheus(text)
    snap = MetricsSnapshot(t_ns=time.perf_counter_ns() if t_ns is None else t_ns)
    for attr, names, combine in (("prefix_queries", QUERIES, sum), ("prefix_hits", HITS, sum),
                                 ("preemptions", PREEMPTIONS, sum), ("running", RUNNING, sum),
                                 ("waiting", WAITING, sum), ("kv_usage", KV_USAGE, max)):
        name, samples = _first(series, names)
        value = _count([v for _, v in samples], combine) if name else None
        if value is not None:
            setattr(snap, attr, value)
            snap.names[attr] = name
    if CACHE_CONFIG in series:
        labels = dict(series[CACHE_CONFIG][0][0])
        snap.refused = _impossible_config(labels)
        if snap.refused is not None:
            return snap
        snap.cache_config = labels
        snap.engines = len(series[CACHE_CONFIG])
        snap.names["cache_config"] = CACHE_CONFIG
    return snap


@frozen
class MetricsDelta(Record):
    """Counter increases between two snapshots (None where either side lacks the series)."""

    queries: float | None
    hits: float | None
    preemptions: float | None

    @property
    def hit_ratio(self) -> float | None:
        if not self.queries or self.hits is None:
            return None
        return self.hits / self.queries


def delta(before: MetricsSnapshot | None, after: MetricsSnapshot | None) -> MetricsDelta | None:
    if before is None or after is None:
        return None

    def d(a, b):
        return None if a is None or b is None else b - a

    return MetricsDelta(d(before.prefix_queries, after.prefix_queries), d(before.prefix_hits, after.prefix_hits),
                        d(before.preemptions, after.preemptions))


class MetricsScraper:
    """Scrapes ``/metrics`` through a StreamClient; after the first failure it says why and stops asking."""

    def __init__(self, client, enabled: bool = True):
        self.client = client
        self.enabled = enabled
        self.note: str | None = None if enabled else "/metrics not used (disabled)"
        self.refused: str | None = None  # a cache_config_info refused as impossible, said once (endpoint and label)

    async def scrape(self) -> MetricsSnapshot | None:
        if not self.enabled:
            return None
        snap, why = await self.read()
        if snap is None:
            self._give_up(why or "/metrics could not be read")
            return None
        if snap.refused is not None and self.refused is None:
            self.refused = f"{self.client.base_url}/metrics: {snap.refused}"
        if snap.prefix_queries is None and snap.cache_config is None:
            self._give_up("/metrics has no vllm: prefix-cache series (not a vLLM server, or a version servesize does not know)")
            return None
        return snap

    async def read(self, timeout_s: float = 30) -> tuple[MetricsSnapshot | None, str | None]:
        """One /metrics read: its snapshot, or None and why (nothing is latched: ``scrape`` gives up on it)."""
        try:
            status, text = await self.client.get("/metrics", timeout_s=timeout_s)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            return None, f"/metrics could not be read ({type(exc).__name__}: {exc})"
        except UnicodeDecodeError as exc:
            return None, (f"{self.client.base_url}/metrics answered a body that is not UTF-8 text ({exc.reason} at byte "
                          f"{exc.start}): not trusted")
        if status != 200:
            return None, f"/metrics answered HTTP {status}: the server publishes no Prometheus metrics there"
        return snapshot_from_text(text), None

    def _give_up(self, note: str) -> None:
        self.enabled = False
        self.note = note + "; continuing without it"


class GaugeSampler:
    """An endpoint's gauges during a rung: every ``interval_s`` one /metrics read; kept as running peaks and
    means (bounded whatever the rung's length), never as a list. A read that fails is counted and skipped: it
    does not stop the scraper the rung's counters come from."""

    def __init__(self, scraper: MetricsScraper, interval_s: float | None = None):
        self.scraper, self.interval_s = scraper, GAUGE_SAMPLE_S if interval_s is None else interval_s
        self.samples = self.failed = 0
        self._peak: dict[str, float] = {}
        self._sum: dict[str, float] = {}
        self._n: dict[str, int] = {}
        self._task: asyncio.Task | None = None

    def add(self, snap: MetricsSnapshot | None) -> None:
        if snap is None:
            return
        self.samples += 1
        for name in ("kv_usage", "running", "waiting"):
            v = getattr(snap, name)
            if v is not None and math.isfinite(v):
                self._peak[name] = max(self._peak.get(name, v), v)
                self._sum[name] = self._sum.get(name, 0.0) + v
                self._n[name] = self._n.get(name, 0) + 1

    async def _read(self) -> MetricsSnapshot | None:
        snap, _ = await self.scraper.read(timeout_s=max(1.0, 5 * self.interval_s))
        self.failed += snap is None
        return snap

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            self.add(await self._read())

    def start(self) -> None:
        if self.scraper.enabled:
            self._task = asyncio.ensure_future(self._loop())

    async def stop(self) -> dict | None:
        """The rung's gauges: samples (and failed reads), each gauge's peak and mean over the samples that carried
        it; None when nothing was sampled."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        if not self.samples:
            return None
        return {"samples": self.samples, "failed_reads": self.failed, **{f"{k}_peak": v for k, v in self._peak.items()},
                **{f"{k}_mean": self._sum[k] / self._n[k] for k in self._sum}}
