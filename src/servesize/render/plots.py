"""Plots (matplotlib, Agg backend): a plan's 2x2 figure, a workload fit's histogram and a fleet's frontier.

The only place in the library that writes image files; each function returns the path it wrote.
"""

from __future__ import annotations

import io
import math
import os
import pathlib
from dataclasses import replace

import numpy as np

from servesize.errors import BadInput
from servesize.limits import PLOT_SUFFIXES, check_output, write_output
from servesize.planning.ceilings import CEILINGS, decode_setup
from servesize.planning.decode import contexts_from, decode_curve
from servesize.planning.inputs import knob_value
from servesize.planning.plan import Plan, sweep
from servesize.sizing.result import FleetResult
from servesize.workload.fit import WorkloadFit


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise BadInput("plots need matplotlib (pip install matplotlib)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path, dpi: int) -> str:
    """Render to memory in the format the extension names, then write the file whole (a full disk: one line)."""
    plt = _pyplot()
    full = check_output(path, "--plot", suffixes=PLOT_SUFFIXES)
    buf = io.BytesIO()
    try:
        fig.savefig(buf, dpi=dpi, format=os.path.splitext(full)[1][1:].lower())
    finally:
        plt.close(fig)
    write_output(full, buf.getvalue(), "--plot")
    return full


def plot_plan(plan: Plan, path, median_values=None) -> str:
    """2x2 figure: warm-user histogram, capacity vs median, decode curve, the four ceilings."""
    plt = _pyplot()

    fixed, workload, knobs, res = plan.fixed, plan.workload, plan.knobs, plan.result
    fig, ax = plt.subplots(2, 2, figsize=(12, 9))
    # 1: warm users distribution (re-run the fill to get the counts)
    w = res.warm
    ax[0, 0].bar(["p5", "p50", "p95"], [w.users.p5, w.users.p50, w.users.p95], color=["#c44", "#48c", "#4a4"])
    ax[0, 0].set_title("warm users (percentiles over fills)")
    ax[0, 0].set_ylabel("users")
    # 2: capacity vs median
    meds = median_values or [0.5 * workload.user.median_tokens, workload.user.median_tokens, 2 * workload.user.median_tokens,
                             4 * workload.user.median_tokens]
    sw = sweep(fixed, workload, replace(knobs, fills=min(knobs.fills, 300), decode_fills=min(knobs.decode_fills or 400, 150)),
               "median", meds)
    xs = [r["value"] / 1000 for r in sw["rows"]]
    for key in CEILINGS:
        ax[0, 1].plot(xs, [r["ceilings"][key] for r in sw["rows"]], marker="o", label=key)
    ax[0, 1].plot(xs, [r["warm_users"]["p50"] for r in sw["rows"]], "k--", label="warm p50")
    ax[0, 1].set_xlabel("user median context (k tokens)")
    ax[0, 1].set_ylabel("users")
    ax[0, 1].set_title("capacity vs session median")
    ax[0, 1].legend()
    # 3: decode p50 curve
    setup = decode_setup(fixed, knobs)
    top = max(2 * res.decode.n, int(w.gpu_resident.p50 / fixed.dp) + 10, 16)
    ns = np.unique(np.linspace(1, top, 40).astype(int))
    curve = decode_curve(setup, contexts_from(workload), ns, fills=min(knobs.decode_fills or 400, 200), seed=knobs.seed)
    ax[1, 0].plot(curve["n"], curve["p50"], label="p50 per user")
    ax[1, 0].fill_between(curve["n"], curve["p5"], curve["p95"], alpha=0.2, label="p5-p95")
    ax[1, 0].axhline(knob_value(knobs, "decode_floor"), color="r", ls="--", label=f"floor {knob_value(knobs, 'decode_floor'):g}")
    ax[1, 0].axhline(knob_value(knobs, "comfortable_floor"), color="orange", ls="--",
                     label=f"comfortable {knob_value(knobs, 'comfortable_floor'):g}")
    ax[1, 0].axvline(w.gpu_resident.p50 / fixed.dp, color="k", ls=":", label="GPU-resident warm p50")
    ax[1, 0].set_xlabel("concurrent decoders per replica")
    ax[1, 0].set_ylabel("tok/s per user")
    ax[1, 0].set_title("decode speed")
    ax[1, 0].legend()
    # 4: ceilings
    colours = ["#c44" if k == res.binding else "#888" for k in CEILINGS]
    ax[1, 1].bar(list(CEILINGS), [res.values[k] for k in CEILINGS], color=colours)
    ax[1, 1].set_title(f"ceilings (users); binding: {res.binding}")
    fig.suptitle(f"{fixed.name} on {fixed.n_gpu}x{fixed.gpu_key}")
    fig.tight_layout()
    return _save(fig, path, dpi=90)


def plot_fit(result: WorkloadFit, path) -> str:
    """Left: histogram of prompt lengths on a log axis with the fitted density (per unit of ln tokens).
    Right: the observed CDF beside the log-normal's, with the KS distance D marked where it is largest."""
    plt = _pyplot()

    x = np.sort(result.user_values)
    f = result.user_fit
    edges = np.geomspace(x.min(), x.max() * 1.0001, min(80, max(10, int(np.sqrt(x.size)))))
    counts, _ = np.histogram(x, bins=edges)
    density = counts / (x.size * np.diff(np.log(edges)))  # per unit ln(tokens): comparable to the normal pdf of ln x
    grid = np.geomspace(edges[0], edges[-1], 400)
    pdf = np.exp(-0.5 * ((np.log(grid) - f.mu) / f.sigma) ** 2) / (f.sigma * math.sqrt(2 * math.pi))
    fig, (ax, cdf_ax) = plt.subplots(1, 2, figsize=(13, 4.8))
    ax.bar(edges[:-1], density, width=np.diff(edges), align="edge", alpha=0.5, color="tab:blue",
           label=f"observed (n = {x.size:,})")
    ax.plot(grid, pdf, color="tab:red", lw=2, label=f"log-normal: median {f.median:,.0f}, sigma {f.sigma:.2f}")
    ax.axvline(f.median, color="tab:red", ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("prompt tokens per request (log scale)")
    ax.set_ylabel("density per unit ln(tokens)")
    ax.legend(loc="upper left", fontsize=8)
    # the CDFs and where they are furthest apart (the KS D)
    observed = np.arange(1, x.size + 1) / x.size
    fitted = _lognormal_cdf(x, f.mu, f.sigma)
    gap = np.maximum(np.abs(observed - fitted), np.abs(observed - 1.0 / x.size - fitted))
    at = int(np.argmax(gap))
    cdf_ax.step(x, observed, where="post", color="tab:blue", label="observed")
    cdf_ax.plot(x, fitted, color="tab:red", lw=1.5, label="log-normal fit")
    cdf_ax.vlines(x[at], min(observed[at], fitted[at]), max(observed[at], fitted[at]), color="k", lw=2,
                  label=f"KS D = {f.ks_d:.3f}")
    cdf_ax.set_xscale("log")
    cdf_ax.set_xlabel("prompt tokens per request (log scale)")
    cdf_ax.set_ylabel("fraction of requests at or below")
    cdf_ax.legend(loc="upper left", fontsize=8)
    written = "the log-normal" if result.distribution == "lognormal" else "the observed distribution (empirical)"
    fig.suptitle(f"servesize workload fit: {pathlib.Path(result.observations.path).name} (written as {written})")
    fig.tight_layout()
    return _save(fig, path, dpi=110)


def _lognormal_cdf(x: np.ndarray, mu: float, sigma: float) -> np.ndarray:
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return 0.5 * (1.0 + erf((np.log(x) - mu) / (sigma * math.sqrt(2.0))))


# -- simulate: hit rate against pool size (servesize simulate --plot) ---------------------------------

def plot_simulation(result, path) -> str:
    """Left: token hit rate against pool size (one-pass LRU, extra user counts, FIFO/Belady bounds, the exact
    replay, the deployment's pool). Right, when users were searched: hit rate at the pool against users."""
    plt = _pyplot()
    c = result.curve
    users = result.users
    fig, axes = plt.subplots(1, 2 if users is not None else 1, figsize=(13 if users is not None else 8, 5), squeeze=False)
    ax = axes[0, 0]
    blocks = c.grid(300)
    ax.plot(blocks * c.block_size, 100 * c.at_pool(blocks), color="black", lw=2.2, label=f"LRU, one pass ({_label(result)})")
    shades = plt.get_cmap("viridis")(np.linspace(0.15, 0.85, max(len(result.extra_curves), 1)))
    for (label, curve), shade in zip(result.extra_curves, shades):
        b = curve.grid(300)
        ax.plot(b * curve.block_size, 100 * curve.at_pool(b), lw=1.2, color=shade, label=f"LRU, {label}")
    if result.bounds:
        tokens = [b["tokens"] for b in result.bounds]
        ax.plot(tokens, [100 * b["fifo"] for b in result.bounds], "v", color="tab:orange", label="FIFO")
        ax.plot(tokens, [100 * b["belady"] for b in result.bounds], "^", color="tab:green", label="Belady (optimum)")
    ax.axhline(100 * c.ideal_token_hit_rate, color="k", ls="--", lw=1, label=f"unbounded {100 * c.ideal_token_hit_rate:.1f}%")
    target = result.choices.get("target", 0.9)
    ax.axhline(100 * target, color="tab:red", ls=":", lw=1, label=f"target {target:.0%}")
    if result.pool is not None:
        ax.axvline(result.pool.tokens, color="tab:purple", ls="-.", lw=1.2, label=f"the deployment's pool ({result.pool.tokens:,} tokens)")
    if result.exact is not None:
        ax.plot([result.pool.tokens], [100 * result.exact.token_hit_rate], "o", color="tab:purple", ms=8,
                label=f"exact replay, pinning on ({100 * result.exact.token_hit_rate:.1f}%)")
    ax.set_xscale("log")
    ax.set_ylim(0, 100)
    ax.set_xlabel("KV pool (tokens, log scale)")
    ax.set_ylabel("token hit rate (%) of the measured requests")
    ax.set_title(f"{result.trace['name']}: hit rate against pool size")
    ax.legend(loc="upper left", fontsize=6.5, framealpha=0.9)  # the curves rise to the right of it
    if users is not None:
        _plot_users(axes[0, 1], result)
    fig.tight_layout()
    return _save(fig, path, dpi=110)


def _label(result) -> str:
    ch = result.choices
    who = f"{ch['users']} users" if "users" in ch else f"{ch['sessions']} sessions"
    return f"{who}, {ch['requests']}, align {ch['align']}, warm-up {ch['warmup']:.0%}"


def _plot_users(ax, result) -> None:
    u = result.users
    pts = sorted(u.points, key=lambda p: p.users)
    ax.plot([p.users for p in pts], [100 * p.hit_rate for p in pts], "o-", color="tab:blue", label="one pass at the pool")
    ax.axhline(100 * u.target, color="tab:red", ls=":", lw=1, label=f"target {u.target:.0%}")
    ax.axvline(u.users, color="tab:blue", ls="--", lw=1, label=f"users at {u.target:.0%}: {u.users:,}")
    if result.users_exact:
        ax.plot([result.users_exact["users"]], [100 * result.users_exact["token_hit_rate"]], "o", color="tab:purple", ms=8,
                label="exact replay, pinning on")
    if result.plan is not None:
        w = result.plan["warm_users"]
        ax.axvspan(w["p5"], w["p95"], color="tab:gray", alpha=0.2, label=f"plan's warm users p5-p95 (p50 {w['p50']:,.0f})")
    ax.set_xscale("log")
    ax.set_ylim(0, 100)
    ax.set_xlabel("concurrent users (log scale)")
    ax.set_ylabel("token hit rate (%) at the deployment's pool")
    ax.set_title(f"users at the pool ({u.num_blocks:,} blocks)")
    ax.legend(loc="lower left", fontsize=7)


def plot_fleet(result: FleetResult, path) -> str:
    """The cost-users frontier of a fleet search: each frontier fleet (a step: what the next users cost), the
    cheapest fleets that serve everyone, the winner, and the users asked for."""
    plt = _pyplot()

    fig, ax = plt.subplots(figsize=(10, 6))
    front = result.frontier
    if front:
        ax.step([o.users_served for o in front], [o.cost_per_month for o in front], where="pre", color="#888",
                lw=1, zorder=1)
    gpus = sorted({o.gpu for o in (*front, *result.options)})
    colours = {g: plt.get_cmap("tab10")(i % 10) for i, g in enumerate(gpus)}
    for gpu in gpus:
        pts = [o for o in front if o.gpu == gpu]
        if pts:
            ax.scatter([o.users_served for o in pts], [o.cost_per_month for o in pts], color=colours[gpu], s=36,
                       label=f"{gpu} (frontier)", zorder=3)
    others = [o for o in result.options[1:]]
    if others:
        ax.scatter([o.users_served for o in others], [o.cost_per_month for o in others], marker="s", s=40,
                   facecolors="none", edgecolors=[colours[o.gpu] for o in others], label="next cheapest", zorder=2)
    w = result.winner
    if w is not None:
        ax.scatter([w.users_served], [w.cost_per_month], marker="*", s=260, color="#c44", zorder=4,
                   label=f"cheapest: {w.gpus} TP{w.tp}xDP{w.dp}, {w.cost_per_month:,.0f} {w.currency}/month")
    ax.axvline(result.users, color="k", ls="--", lw=1, label=f"{result.users:,} users asked for")
    ax.set_xlabel("users served (warm p5 and every ceiling, at the teams' mix)")
    ax.set_ylabel(f"cost per month ({result.currency})")
    who = f"{result.users:,} users" if len(result.teams) == 1 else f"{len(result.teams)} teams, {result.users:,} users"
    ax.set_title(f"servesize fleet: {who}; frontier of cost against users served")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return _save(fig, path, dpi=100)
