"""Plots (matplotlib, Agg backend): a plan's 2x2 figure and a workload fit's histogram.

The only place in the library that writes image files; each function returns the path it wrote.
"""

from __future__ import annotations

import math
import pathlib
from dataclasses import replace

import numpy as np

from servesize.errors import BadInput
from servesize.planning.ceilings import CEILINGS, decode_setup
from servesize.planning.decode import contexts_from, decode_curve
from servesize.planning.inputs import knob_value
from servesize.planning.plan import Plan, sweep
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
    plt = _pyplot()
    try:
        fig.savefig(path, dpi=dpi)
    except OSError as exc:
        raise BadInput(f"cannot write plot {str(path)!r}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
    return str(path)


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
