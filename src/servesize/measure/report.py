"""Text reports of measurement results: PoolResult and SessionsResult, registered with ``render_text``."""

from __future__ import annotations

from servesize.measure.pool import PoolResult
from servesize.measure.sessions import SessionsResult
from servesize.render.text import render_text


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:,.1f} ms"


def _pct(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value * 100:+.{digits}f}%"


def table(headers: list[str], rows: list[list[str]], align: str | None = None) -> str:
    """A plain text table; ``align`` is one 'l'/'r' per column (default: first left, rest right)."""
    align = align or "l" + "r" * (len(headers) - 1)
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]

    def line(cells):
        return "  ".join(str(c).ljust(w) if a == "l" else str(c).rjust(w) for c, w, a in zip(cells, widths, align)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


@render_text.register
def render_pool(r: PoolResult, explain: bool = False) -> str:
    out = [f"measure pool: {r.url}  model {r.model}"]
    bs = f" (= {(r.prompt_tokens - 1) // r.block_size} blocks of {r.block_size} + 1)" if r.block_size else ""
    out.append(f"prompts of {r.prompt_tokens:,} tokens{bs}, {r.rounds} rounds each (round 1 fills, later rounds test warmth); "
               f"warm/cold from {r.signal or '-'}")
    out.append("")
    rows = []
    for p in r.probes:
        s = p.summary()
        label = f"{p.n}" + (f" + {p.extra_blocks} blk" if p.extra_blocks else "")
        rows.append([str(s["seq"]), s["stage"], label, f"{s['tokens']:,}", f"{s['warm_fraction']:.2f}", s["signal"] or "-",
                     _ms(s["ttft_cold_p50_s"]), _ms(s["ttft_later_p50_s"]), "warm" if s["warm"] else "cold"])
    out.append(table(["probe", "stage", "prompts", "tokens", "warm share", "signal", "cold TTFT p50", "later TTFT p50", "verdict"],
                     rows, "llrrrlrrl"))
    out.append("")
    if r.pool_high_tokens is None:
        pool = f">= {r.pool_low_tokens:,} tokens (lower bound)"
    else:
        pool = f"[{r.pool_low_tokens:,}, {r.pool_high_tokens:,}) tokens"
        if r.resolution == "block":
            if r.block_size is None:  # build() gives 'block' only from the fine stage, which needs it
                raise RuntimeError("a pool known to the block without a block size")
            pool += f"  = {r.pool_low_tokens // r.block_size:,} blocks of {r.block_size}, known to the block"
        else:
            pool += f"  ({r.n_warm} prompts warm, {r.n_cold} cold: known to the prompt)"
    out.append(f"KV pool kept warm:  {pool}")
    if r.engine_tokens is not None:
        labels = r.engine_labels or {}
        inside = "inside the interval" if r.inside(r.engine_tokens) else f"{_pct(r.relative_error(r.engine_tokens))} vs measured"
        out.append(f"engine's own figure: {r.engine_tokens:,} tokens (cache_config_info num_gpu_blocks {labels.get('num_gpu_blocks')} "
                   f"x block_size {labels.get('block_size')}): {inside}")
    else:
        out.append("engine's own figure: not published (no vllm:cache_config_info)")
    if r.predicted_tokens is not None:
        inside = ", inside the interval" if r.inside(r.predicted_tokens) else ""
        out.append(f"prediction: {r.predicted_tokens:,} tokens ({r.predicted_source}), "
                   f"{_pct(r.relative_error(r.predicted_tokens))} vs measured {r.measured_tokens:,.0f}{inside}")
    else:
        out.append('prediction: none given (--predicted-tokens N, or --predict "MODEL --gpus ... [vLLM flags]")')
    notes = r.notes + r.signal_notes
    if notes:
        out.append("")
        out.extend(f"note: {n}" for n in notes)
    if r.record_path:
        out.append(f"record: {r.record_path}")
    if explain:
        out.append("")
        out.append("how: n unique-id prompts of S tokens in parallel for R rounds; LRU's cyclic worst case makes warmth "
                   "fall off a cliff one prompt past the pool, so n is bisected (galloping from the prediction) and, "
                   "with a known block size, one extra prompt of j blocks is bisected to the block.")
        out.append(f"pool = n_warm x (S - 1) + j_warm x block = {r.n_warm} x {r.prompt_tokens - 1} + "
                   f"{r.extra_blocks_warm} x {r.block_size or '-'} = {r.pool_low_tokens:,} tokens")
    out.append("")
    out.append("does not establish: warmth under real traffic (mixed lengths, shared prefixes, think time: "
               "see measure sessions), nor decode speed or latency under load.")
    return "\n".join(out)


def hit_rate_text(rate: float | None, target: float) -> str:
    """A warm-hit rate with enough digits that it is never shown on the other side of the target than
    it is (0.898 against 90% reads 89.8%, 0.8996 reads 89.96%, never 90.0%)."""
    if rate is None:
        return "-"
    for digits in range(1, 6):
        shown = round(rate * 100, digits)
        if (shown >= target * 100) == (rate >= target):
            return f"{rate * 100:.{digits}f}%"
    return f"{rate * 100:.6f}%"


RUNG_STATE = {"warm": "warm", "below": "below {target}", "failed": "FAILED", "no signal": "no signal"}


def short_stop(stop: str | None) -> str:
    """A stop reason's head (``error rate 83% > 5%``); the whole reason is in the notes."""
    return (stop or "").split(":")[0]


def _rung_row(g, target: float) -> list[str]:
    hits = f"{g.warm_hits}/{g.returning}" if g.returning else "-"
    if g.returning_errors:
        hits += f" ({g.returning_errors} failed)"
    head = [str(g.users), str(g.requests), f"{g.errors}", hits, hit_rate_text(g.warm_hit_rate, target),
            RUNG_STATE[g.state(target)].format(target=f"{target:.0%}")]
    if g.failed:  # no measurement: its few completed requests' timings are not shown as if they were one
        return head + ["-"] * 7 + [short_stop(g.stop)]
    return head + [_ms(g.ttft_hit.get("p50_s")), _ms(g.ttft_hit.get("p95_s")), _ms(g.ttft_miss.get("p50_s")),
                   _ms(g.ttft_miss.get("p95_s")), _ms(g.itl.get("p50_s")),
                   "-" if g.decode_tok_per_s_p50 is None else f"{g.decode_tok_per_s_p50:,.1f}",
                   "-" if g.preemptions is None else f"{g.preemptions:,.0f}", short_stop(g.stop)]


def knee_line(r: SessionsResult) -> str:
    k, target = r.knee, f"{r.warm_target:.0%}"
    warm, cold, unknown = k["warm_users"], k["cold_users"], k.get("inconclusive_users")
    why = next((short_stop(g.stop) or g.state(r.warm_target) for g in r.rungs if g.users == unknown), "")
    if cold is not None:
        if warm is None:
            return f"knee: even the first rung ({cold} users) was below a warm-hit rate of {target}: warm capacity < {cold} users"
        return f"knee: warm-hit rate >= {target} up to {warm} users, below it at {cold}: warm capacity in [{warm}, {cold}) users"
    if unknown is not None:
        if warm is None:
            return f"knee: not measured: the first rung ({unknown} users) is no measurement ({why})"
        return (f"knee: warm-hit rate >= {target} up to {warm} users; the {unknown}-user rung is no measurement ({why}): "
                f"warm capacity >= {warm} users, its upper edge not measured")
    if warm is None:
        return "knee: not measured (no rung ran)"
    return f"knee: every rung kept a warm-hit rate >= {target}: warm capacity >= {warm} users (the ladder's top)"


def _endpoint_line(g, e: dict, target: float) -> str:
    """One endpoint's share of one rung: its requests, warm hits, and what its own /metrics counted."""
    rate = hit_rate_text(e["warm_hit_rate"], target)
    metrics = f", /metrics prefix-cache hits {e['metrics_hit_ratio']:.1%} of queried tokens" \
        if e.get("metrics_hit_ratio") is not None else ""
    return (f"  {g.users:>5} users  {e['url']}: {e['requests']} requests from {e['users']} users, {e['errors']} errors, "
            f"warm {e['warm_hits']}/{e['returning']} ({rate}){metrics}")


def _gauge_lines(g, url: str) -> list[str]:
    """Each endpoint's KV usage and scheduler queue as sampled during rung g (GaugeSampler), one line each."""
    urls = [e["url"] for e in g.endpoints] if g.endpoints else [url]
    out = []
    for u, gauge in zip(urls, g.gauges or []):
        if not gauge:
            continue
        parts = []
        if "kv_usage_peak" in gauge:
            parts.append(f"KV usage peak {gauge['kv_usage_peak']:.0%} (mean {gauge['kv_usage_mean']:.0%})")
        for name in ("running", "waiting"):
            if f"{name}_peak" in gauge:
                parts.append(f"{name} peak {gauge[f'{name}_peak']:,.0f} (mean {gauge[f'{name}_mean']:,.1f})")
        failed = f", {gauge['failed_reads']} failed reads" if gauge.get("failed_reads") else ""
        out.append(f"  {g.users:>5} users  {u}: {', '.join(parts) or 'no gauge published'} "
                   f"({gauge['samples']} samples{failed})")
    return out


@render_text.register
def render_sessions(r: SessionsResult, explain: bool = False) -> str:
    out = [f"measure sessions: {r.url}  model {r.model}"]
    out.append(r.workload_line)
    out.append("")
    rows = [_rung_row(g, r.warm_target) for g in r.rungs]
    out.append(table(["users", "requests", "errors", "warm hits", "warm-hit rate", "rung", "hit TTFT p50", "hit p95",
                      "miss TTFT p50", "miss p95", "ITL p50", "tok/s/user", "preempt", "stopped"], rows,
                     "rrrrrlrrrrrrrl"))
    lines = [_endpoint_line(g, e, r.warm_target) for g in r.rungs for e in (g.endpoints or [])]
    if lines:
        out.append("")
        out.extend(lines)
    gauges = [line for g in r.rungs for line in _gauge_lines(g, r.url)]
    if gauges:
        out.append("")
        out.append("the server's gauges during each rung (/metrics, sampled):")
        out.extend(gauges)
    out.append("")
    out.append(f"warmth signal: {r.signal}; warm hits = warm returning requests / returning requests sent (a failed one "
               f"is a miss); a rung with more than {r.max_error_rate:.0%} of its requests failed is FAILED: no measurement")
    out.append(knee_line(r))
    if r.verdicts and r.predicted_source:
        out.append(f"predictions: {r.predicted_source}")
    for v in r.verdicts:
        out.append(v["line"])
    if r.notes:
        out.append("")
        out.extend(f"note: {n}" for n in r.notes)
    if r.record_path:
        out.append(f"record: {r.record_path}")
    out.append("")
    out.append("does not establish: " + r.does_not_establish)
    return "\n".join(out)


class StderrProgress:
    """One updating progress line on stderr (a plain line per update when stderr is not a terminal, throttled)."""

    def __init__(self, enabled: bool = True, min_interval_s: float = 0.2):
        import sys
        import time

        self._sys, self._time = sys, time
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.min_interval_s = min_interval_s if self.tty else 2.0
        self._last = 0.0
        self._width = 0

    def __call__(self, message: str) -> None:
        if not self.enabled:
            return
        now = self._time.monotonic()
        if now - self._last < self.min_interval_s:
            return
        self._last = now
        if self.tty:
            pad = max(0, self._width - len(message))
            self._sys.stderr.write("\r" + message + " " * pad)
            self._width = len(message)
        else:
            self._sys.stderr.write(message + "\n")
        self._sys.stderr.flush()

    def end(self) -> None:
        if self.enabled and self.tty and self._width:
            self._sys.stderr.write("\r" + " " * self._width + "\r")
            self._sys.stderr.flush()
            self._width = 0
