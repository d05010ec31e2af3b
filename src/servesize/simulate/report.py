"""How a SimulationResult reads in a terminal (``servesize simulate`` without ``--json``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from servesize.units import fmt_tokens

TABLE_ROWS = 9  # pool sizes shown in the curve's table


def _pct(x: float | None) -> str:
    return "    -" if x is None else f"{100 * x:5.1f}%"


def _head(res: Any) -> list[str]:
    t, c = res.trace, res.choices
    lines = [f"{t['name']}: {t['requests']:,} requests in {t['sessions']:,} sessions ({t['format']}, "
             f"{t['block_size']}-token ids; {t['distinct_blocks']:,} distinct prefixes)",
             f"  replayed: {res.choices_line}"]
    if res.pool is not None:
        p = res.pool
        lines.append(f"  pool: {p.num_blocks:,} blocks x {p.block_size:,} tokens = {p.tokens:,} tokens ({p.source})")
    if c.get("skipped"):
        lines.append("  left out: " + ", ".join(f"{n:,} {why}" for why, n in c["skipped"].items()))
    return lines


def _definitions(res: Any, explain: bool) -> list[str]:
    if not res.definitions:
        return [f"unbounded cache: {_pct(res.curve.ideal_token_hit_rate).strip()} of measured prompt tokens cached"]
    lines = ["unbounded cache, by definition of 'hit rate' (measured requests):"]
    for d in res.definitions:
        lines.append(f"  {d['name']:<13}{_pct(d['value'])}" + (f"   {d['meaning']}" if explain else ""))
    return lines


def _curve(res: Any) -> list[str]:
    c = res.curve
    grid = c.grid(TABLE_ROWS)
    if res.pool is not None:
        grid = np.unique(np.append(grid, res.pool.num_blocks))
    lines = ["LRU token hit rate at every pool size (one pass, pinning ignored):",
             "  pool blocks      pool tokens   hit rate   warm requests"]
    for nb in grid:
        cap = c.capacity_of_pool(nb)
        mark = "  <- the deployment's pool" if res.pool is not None and nb == res.pool.num_blocks else ""
        if nb < c.smallest_pool:
            mark += "  (too small for the largest request: vLLM would refuse it)"
        lines.append(f"  {int(nb):>11,} {fmt_tokens(int(nb) * c.block_size):>16} {_pct(float(c.at_pool(nb))):>10} "
                     f"{_pct(float(c.warm_request_rate(cap))):>15}{mark}")
    target = res.choices.get("target", 0.9)
    need = c.pool_for(target)
    lines.append(f"  smallest pool for {target:.0%}: " + ("never reached (the unbounded cache stays below it)" if need is None
                 else f"{need:,} blocks = {fmt_tokens(need * c.block_size)} tokens"))
    return lines


def _extra(res: Any) -> list[str]:
    if not res.extra_curves:
        return []
    lines = ["LRU curves for more user counts (one pass each; unbounded, and at the deployment's pool):"]
    for label, cv in res.extra_curves:
        at = f", at the pool {_pct(float(cv.at_pool(res.pool.num_blocks))).strip()}" if res.pool is not None else ""
        need = cv.pool_for(res.choices.get("target", 0.9))
        lines.append(f"  {label:>12}: unbounded {_pct(cv.ideal_token_hit_rate).strip()}{at}; "
                     + ("target never reached" if need is None else f"{fmt_tokens(need * cv.block_size)} tokens for the target"))
    return lines


def _bounds(res: Any) -> list[str]:
    if not res.bounds:
        return []
    lines = ["bounds at chosen sizes (same requests, window and cap):", "  pool tokens       FIFO      LRU   Belady"]
    for b in res.bounds:
        mark = "  <- the deployment's pool" if b["deployment"] else ""
        lines.append(f"  {fmt_tokens(b['tokens']):>11} {_pct(b['fifo']):>10} {_pct(b['lru']):>8} {_pct(b['belady']):>8}{mark}")
    return lines


def _exact(res: Any) -> list[str]:
    e = res.exact
    if e is None:
        return []
    s = e.summary()
    one_pass = float(res.curve.at_pool(e.num_blocks))
    warmth = [w["mean_warmth"] for w in e.session_warmth() if w["mean_warmth"] is not None]
    kept = sum(1 for w in warmth if w >= res.choices.get("target", 0.9))
    sessions = [] if res.trace["sessions"] >= res.trace["requests"] else [
        f"  sessions: {kept:,} of {len(warmth):,} kept a mean warmth >= {res.choices.get('target', 0.9):.0%} "
        "(warmth: hit / what an unbounded cache serves)"]
    return [f"exact replay at the pool (pinning on; service times: {s['service']}; outputs "
            f"{'take blocks' if s['output_blocks'] else 'left out'}):",
            f"  token hit rate {_pct(s['token_hit_rate']).strip()} (one pass: {_pct(one_pass).strip()}), requests with a hit "
            f"{_pct(s['request_hit_rate']).strip()}, warm requests {_pct(s['warm_request_rate']).strip()}",
            f"  evictions {s['evictions_measured']:,} in the window; admission waits {s['admission_waits']:,} "
            f"(p50 {s['wait_s_p50']:,.1f} s, max {s['wait_s_max']:,.1f} s); peak pinned {s['peak_pinned_blocks']:,} blocks"
            + (f"; {s['too_large']:,} requests larger than the pool" if s["too_large"] else "")] + sessions


def _users(res: Any) -> list[str]:
    u = res.users
    if u is None:
        return []
    pts = sorted(u.points, key=lambda p: p.users)
    lines = [f"users at {u.target:.0%}: {u.line()} (one pass; each N a fresh draw of sessions)",
             "  users   " + " ".join(f"{p.users:>6,}" for p in pts),
             "  hit     " + " ".join(f"{_pct(p.hit_rate):>6}" for p in pts)]
    if res.users_exact:
        x = res.users_exact
        lines.append(f"  exact replay of {x['users']:,} users with pinning (service {x['service']}): token hit rate "
                     f"{_pct(x['token_hit_rate']).strip()}, admission waits {x['admission_waits']:,}")
    return lines


def _plan(res: Any) -> list[str]:
    if res.plan is None:
        return []
    w, f = res.plan["warm_users"], res.fitted
    lines = [f"plan for the workload fitted from this trace: warm users p5 {w['p5']:,.0f} / p50 {w['p50']:,.0f} / "
             f"p95 {w['p95']:,.0f} (binding ceiling: {res.plan['binding']})",
             "  workload: " + res.plan["workload"].replace("\n", "; ")]
    if f is not None:
        wl = f.workload
        extra = [f"think time median {wl.think_time_median_s:.3g} s, mean {wl.think_time_s:g} s"]
        if f.session_peak_tokens_p50 is not None:
            extra.append(f"session peak context p50 {f.session_peak_tokens_p50:,.0f} tokens")
        if f.requests_per_session_p50 is not None:
            extra.append(f"{f.requests_per_session_p50:,.0f} requests per session (p50)")
        lines.append("  " + "; ".join(extra))
    return lines


def render(res: Any, explain: bool = False) -> str:
    lines = _head(res) + _definitions(res, explain) + _curve(res) + _extra(res) + _bounds(res) + _exact(res) + _users(res) + _plan(res)
    lines.append("read: " + _read_line(res.trace["read"]))
    lines += [f"note: {n}" for n in res.notes]
    if res.plot:
        lines.append(f"plot: {res.plot}")
    if explain:
        lines.append("seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in res.seconds.items()))
    return "\n".join(lines)


def _read_line(r: dict) -> str:
    parts = [f"{r['requests']:,} requests from {r['lines']:,} lines"]
    if r["bad_lines"] or r["bad_requests"]:
        parts.append(f"{r['bad_lines']:,} bad lines and {r['bad_requests']:,} bad requests skipped"
                     + (f" (first: {r['examples'][0]})" if r["examples"] else ""))
    if r["skipped"]:
        parts.append(", ".join(f"{n:,} {why}" for why, n in r["skipped"].items()))
    if r["truncated"]:
        parts.append(f"truncated: {r['truncated']}")
    return "; ".join(parts)
