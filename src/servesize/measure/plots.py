"""PNG plots of measurement results (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import io
import os
from typing import TYPE_CHECKING

from servesize.limits import PLOT_SUFFIXES, check_output, write_output

if TYPE_CHECKING:  # pragma: no cover
    from servesize.measure.pool import PoolResult
    from servesize.measure.sessions import SessionsResult


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path) -> None:
    """Render to memory in the format the extension names, then write the file whole (a full disk: one line)."""
    full = check_output(path, "--plot", suffixes=PLOT_SUFFIXES)
    buf = io.BytesIO()
    fig.savefig(buf, dpi=120, bbox_inches="tight", format=os.path.splitext(full)[1][1:].lower())
    write_output(full, buf.getvalue(), "--plot")


def plot_pool(result: PoolResult, path) -> None:
    """Left: warm share vs prompts in flight (coarse probes). Right: TTFT of every later-round request, hits vs misses."""
    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    coarse = sorted((p for p in result.probes if p.stage == "coarse"), key=lambda p: p.n)
    ax1.plot([p.n for p in coarse], [p.decided.warm_fraction for p in coarse], "o-")
    if result.n_cold is not None:
        ax1.axvline(result.n_warm + 0.5, color="grey", ls="--", lw=1, label=f"edge: {result.n_warm} warm / {result.n_cold} cold")
        ax1.legend(loc="lower left")
    ax1.set_xlabel(f"prompts of {result.prompt_tokens:,} tokens in parallel (n)")
    ax1.set_ylabel("warm share, rounds 2..R")
    ax1.set_ylim(-0.05, 1.05)
    ax1.set_title(f"warmth vs n ({result.signal})")
    for warm, colour, label in ((True, "tab:green", "warm (hit)"), (False, "tab:red", "cold (miss)")):
        xs, ys = [], []
        for p in result.probes:
            for rnd, flags in zip(p.rounds[1:], p.decided.flags):
                for r, f in zip(rnd, flags):
                    if f == warm and r.ttft_s is not None:
                        xs.append(sum(p.sizes))
                        ys.append(r.ttft_s * 1000)
        ax2.scatter(xs, ys, s=8, c=colour, label=label, alpha=0.6)
    ax2.set_xlabel("tokens in flight per round")
    ax2.set_ylabel("TTFT (ms)")
    ax2.set_yscale("log")
    ax2.set_title("TTFT of hits and misses")
    ax2.legend(loc="upper left")
    _save(fig, path)
    plt.close(fig)


def plot_sessions(result: SessionsResult, path) -> None:
    """Left: warm-hit rate vs users. Right: TTFT p50/p95 of hits and misses vs users."""
    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    users = [g.users for g in result.rungs]
    nan = float("nan")
    # a failed rung is no measurement: no point for it, a cross on the axis instead
    ax1.plot(users, [g.warm_hit_rate if g.warm_hit_rate is not None and not g.failed else nan for g in result.rungs], "o-")
    failed = [g.users for g in result.rungs if g.failed]
    if failed:
        ax1.plot(failed, [0.0] * len(failed), "x", color="tab:red", ms=10, label="FAILED rung (no measurement)")
    ax1.axhline(result.warm_target, color="grey", ls="--", lw=1, label=f"target {result.warm_target:.0%}")
    ax1.set_xlabel("simulated users")
    ax1.set_ylabel("warm-hit rate (returning requests)")
    ax1.set_ylim(-0.05, 1.05)
    ax1.legend(loc="lower left")
    for key, colour in (("ttft_hit", "tab:green"), ("ttft_miss", "tab:red")):
        for q, style in (("p50_s", "o-"), ("p95_s", "o--")):
            ys = [None if g.failed else getattr(g, key).get(q) for g in result.rungs]
            ax2.plot(users, [y * 1000 if y is not None else nan for y in ys], style, color=colour,
                     label=f"{'hits' if key == 'ttft_hit' else 'misses'} {q[:3]}")
    ax2.set_xlabel("simulated users")
    ax2.set_ylabel("TTFT (ms)")
    ax2.set_yscale("log")
    ax2.legend(loc="upper left", fontsize=8)
    _save(fig, path)
    plt.close(fig)
