"""The chart series and the heavier panels, each its own request so the verdict comes first.

Every point is computed here from library calls; the page draws the numbers it is sent:

- ``decode_chart``       per-user tok/s p5/p50/p95 and the aggregate vs concurrent decoders (C, D),
                         on the plan's own context bank, so the curve meets the floor at the plan's
                         decode ceiling;
- ``miss_chart``         the four ceilings vs the cache-miss rate (``servesize.sweep``) and the burst
                         tolerance along it (G, F);
- ``scaling_chart``      warm users p5 vs GPU count, TP (one shared cache) and DP (replicas) (B);
- ``batch_chart``        what max_num_batched_tokens costs: the activation reserve, the pool and the
                         warm users it leaves (E: the memory side, which is what servesize models);
- ``sensitivity_panel``  where each named assumption flips the verdict (``plan(sensitivity=True)``);
- ``frontier``           every catalogue model x split on these GPUs, ranked at this workload;
- ``fit_matrix_column``  one GPU type's column of the what-fits matrix.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

import servesize.api as api
from servesize.errors import ServesizeError
from servesize.model.catalogue import load_catalogue
from servesize.model.hardware import find_gpu, parse_gpus
from servesize.scenario import FitQuery, Scenario
from servesize.units import fmt_bytes, fmt_tokens
from servesize.web.views import finite, planned, series_words, tok_s_text, users_text

DECODE_POINTS = 48
MISS_POINTS = 21
MAX_CHART_GPUS = 8           # chart B: one 8-GPU NVLink node, as the set-up's GPU count
FRONTIER_FILLS = 300         # the frontier ranks many plans: each at this many fills (open a row for the full plan)
BATCH_TOKENS = (2048, 4096, 8192, 16384, 32768, 65536)


# -- C, D: decode vs concurrency ---------------------------------------------------------------------

def _mfu_caption(mfu: np.ndarray | None, ns: np.ndarray, ceiling: int) -> str:
    if mfu is None:
        return "decode does not price compute on this GPU (no dense FLOP/s in the catalogue)"
    at_ceiling = float(np.interp(max(1, ceiling), ns, mfu))
    return (f"effective MFU (p50): the FLOPs a decode step executes over its roofline time, as a share of TP x the "
            f"GPU's dense peak; {100 * mfu[0]:.2f}% with one decoder, {100 * at_ceiling:.1f}% at the decode ceiling "
            f"({ceiling:,} decoders), {100 * mfu[-1]:.1f}% at {int(ns[-1]):,}")


def decode_chart(scenario: Scenario) -> dict:
    plan = planned(scenario)
    r, w, dp = plan.result, plan.result.warm, plan.fixed.dp
    resident = w.per_replica.get("gpu_resident") if isinstance(w.per_replica, dict) else None
    resident_p5 = float(resident.p5) if resident is not None else float(w.gpu_resident.p5) / dp
    resident_p95 = float(resident.p95) if resident is not None else float(w.gpu_resident.p95) / dp
    top = int(min(api.MAX_DECODERS, max(8, 2 * r.decode.n, math.ceil(1.5 * resident_p95))))
    ns = np.unique(np.round(np.geomspace(1, top, DECODE_POINTS)).astype(int))
    curve, spec_speedup = api.decode_at(plan, ns)
    mfu = api.decode_mfu_at(plan, ns)
    floor, comfortable = r.decode.floor_tok_s, api.knob(plan, "comfortable_floor")
    return finite({
        "mfu_p50": None if mfu is None else mfu.tolist(), "p50_text": [tok_s_text(x) for x in curve["p50"]],
        "mfu_caption": _mfu_caption(mfu, ns, r.decode.n),
        "n": ns.tolist(), "p5": curve["p5"].tolist(), "p50": curve["p50"].tolist(), "p95": curve["p95"].tolist(),
        "aggregate_p50": (curve["aggregate_p50"] * dp).tolist(), "replicas": dp,
        "floor": floor, "comfortable": comfortable, "decode_ceiling": r.decode.n,
        "warm_zone": [resident_p5, resident_p95],
        "caption": f"per replica, {spec_speedup:.2f} tokens per step"
                   + (" (MTP)" if spec_speedup > 1 else "")
                   + f"; the floor {floor:g} tok/s is met up to {r.decode.n:,} decoders; shaded: the GPU-resident warm "
                     f"sessions p5-p95 ({users_text(resident_p5)}-{users_text(resident_p95)}) per replica",
        "aggregate_caption": f"p50 x decoders x {dp} replica(s), tok/s",
        "description": series_words("Per-user decode p50 against concurrent decoders per replica", ns.tolist(),
                                    curve["p50"].tolist(), lambda x: f"{x:,} decoders", lambda y: f"{y:,.0f} tok/s")
                       + f"; the {floor:g} tok/s floor is met up to {r.decode.n:,} decoders.",
        "aggregate_description": series_words("Aggregate decode p50 of the deployment", ns.tolist(),
                                              (curve["aggregate_p50"] * dp).tolist(), lambda x: f"{x:,} decoders",
                                              lambda y: f"{y:,.0f} tok/s") + ".",
        "mfu_description": None if mfu is None else series_words(
            "Effective MFU p50 against concurrent decoders per replica", ns.tolist(), mfu.tolist(),
            lambda x: f"{x:,} decoders", lambda y: f"{y:.1%}") + ".",
    })


# -- F, G: against the cache-miss rate ------------------------------------------------------------

def miss_chart(scenario: Scenario, users: float | None = None) -> dict:
    plan = planned(scenario)
    current = plan.workload.invalidation
    top = max(0.5, min(1.0, 2 * current))
    values = sorted({*np.round(np.linspace(0.0, top, MISS_POINTS), 6).tolist(), round(current, 6)})
    table = api.sweep(scenario, "invalidation", values)
    rows = table["rows"]
    load = float(users) if users is not None else plan.result.values[plan.binding]
    burst = [api.latency_at(plan, load, miss_rate=f).burst_tolerance for f in values]
    binding = [row["binding"] for row in rows]
    changes = [values[i] for i in range(1, len(values)) if binding[i] != binding[i - 1]]
    return finite({
        "x": values, "current": current, "load": load,
        "ceilings": {c: [row["ceilings"][c] for row in rows] for c in api.ceiling_names()},
        "binding": binding, "binding_changes": changes,
        "burst_tolerance": burst,
        "caption": "users each ceiling allows as the share of requests that miss every cached prefix grows; "
                   "the lowest is what you get" + (f"; the binding ceiling first changes hands at a miss rate of "
                                                   f"{changes[0]:.3g}" if changes else ""),
        "burst_caption": f"B*: simultaneous misses one replica answers within the "
                         f"{api.knob(plan, 'ttft_limit_s'):g} s budget at {users_text(load)} users",
        "description": "Users each ceiling allows against the cache-miss rate. " + "; ".join(
            series_words(c, values, [row["ceilings"][c] for row in rows], lambda x: f"{x:.1%} misses",
                         lambda y: f"{y:,.0f} users") for c in api.ceiling_names())
                       + (f"; the binding ceiling first changes hands at {changes[0]:.1%}." if changes else "."),
        "burst_description": series_words("Cold-burst tolerance B* against the cache-miss rate", values, burst,
                                          lambda x: f"{x:.1%} misses", lambda y: f"{y:,.1f} misses at once") + ".",
    })


# -- B: warm users vs GPU count -------------------------------------------------------------------------

def _warm_at(scenario: Scenario, tp: int, dp: int) -> dict:
    gpu = parse_gpus(scenario.gpus, memory=scenario.gpu_memory).gpu.key
    try:
        plan = planned(scenario.replace(gpus=f"{tp * dp}x{gpu}", tensor_parallel_size=tp, data_parallel_size=dp,
                                        fills=min(scenario.fills, FRONTIER_FILLS)))
    except ServesizeError as exc:
        return {"gpus": tp * dp, "tp": tp, "dp": dp, "p5": None, "p95": None, "reason": str(exc)}
    w = plan.result.warm.users
    return {"gpus": tp * dp, "tp": tp, "dp": dp, "p5": float(w.p5), "p50": float(w.p50), "p95": float(w.p95),
            "binding": plan.binding, "binding_users": plan.result.values[plan.binding]}


def scaling_chart(scenario: Scenario) -> dict:
    tp_series = [_warm_at(scenario, tp, 1) for tp in (1, 2, 4, 8) if tp <= MAX_CHART_GPUS]
    base_tp = scenario.tensor_parallel_size
    dp_series = [_warm_at(scenario, base_tp, dp) for dp in range(1, MAX_CHART_GPUS // base_tp + 1)] if base_tp <= 8 else []
    current = {"gpus": scenario.tensor_parallel_size * scenario.data_parallel_size,
               "tp": scenario.tensor_parallel_size, "dp": scenario.data_parallel_size}
    words = [series_words(label, [p["gpus"] for p in ser], [p["p5"] for p in ser], lambda x: f"{x} GPUs",
                          lambda y: f"{y:,.0f} warm users p5") for label, ser in (("TP", tp_series), ("DP", dp_series)) if ser]
    return finite({"tp": tp_series, "dp": dp_series, "current": current,
                   "description": "Warm users p5 against the GPU count. " + "; ".join(words) + ".",
                   "caption": f"warm users p5 (band to p95) at {FRONTIER_FILLS} fills per point: TP widens one shared "
                              f"cache; DP adds replicas of TP {base_tp} (the system total, with sticky routing)"})


# -- E: max_num_batched_tokens ----------------------------------------------------------------------

def batch_chart(scenario: Scenario) -> dict:
    points = []
    for tokens in BATCH_TOKENS:
        varied = scenario.replace(max_num_batched_tokens=tokens, fills=min(scenario.fills, FRONTIER_FILLS))
        try:
            report = api.memory(varied.replace(max_model_len=planned(varied).workload.max_model_len))
            plan = planned(varied)
        except ServesizeError as exc:
            points.append({"tokens": tokens, "reason": str(exc)})
            continue
        points.append({"tokens": tokens, "activation_bytes": report.budget.activation_bytes,
                       "activation_text": fmt_bytes(report.budget.activation_bytes),
                       "pool_tokens": plan.fixed.pool_tokens, "pool_text": fmt_tokens(plan.fixed.pool_tokens),
                       "warm_p5": float(plan.result.warm.users.p5)})
    current = planned(scenario).memory
    return finite({"points": points,
                   "current": current.deployment.max_num_batched_tokens if current is not None else None,
                   "caption": "a bigger prefill chunk needs a bigger activation reserve, which comes out of the KV "
                              "pool; it also holds the decodes in its step longer (the decode ceiling prices that "
                              "stall). What servesize does not model: how the chunk size moves prefill MFU.",
                   "description": series_words("Warm users p5 against max_num_batched_tokens",
                                               [p["tokens"] for p in points if "warm_p5" in p],
                                               [p["warm_p5"] for p in points if "warm_p5" in p],
                                               lambda x: f"{x:,} tokens", lambda y: f"{y:,.0f} users") + "."})


# -- the sensitivity panel ---------------------------------------------------------------------------

def sensitivity_panel(scenario: Scenario) -> dict:
    plan = api.plan(scenario, sensitivity=True)
    rows = []
    for name, s in plan.sensitivity.items():
        lo, hi = s["range"]
        current, flip = s.get("current"), s.get("flip_at")
        distance = abs(flip - current) / (hi - lo) if flip is not None and hi > lo else math.inf
        rows.append({"name": name, **s, "distance": distance})
    rows.sort(key=lambda row: row["distance"])
    # the verdict line with the seed's answer (plan.vs_seed: one ceilings pass per seed switch, too slow for the
    # verdict's own request); the page puts it in place of the verdict's sentence when this panel arrives
    return finite({"binding": plan.binding, "rows": rows, "sensitivity": plan.sensitivity,
                   "verdict": plan.verdict(), "verdict_detail": plan.verdict_detail(), "vs_seed": plan.vs_seed,
                   "seed_sentence": plan.seed_sentence(),
                   "caption": "each row moves one assumption across its range with everything else held; the tick is "
                              "the nearest value where another ceiling takes over; rows nearest a flip first"})


# -- the frontier: every model x split on these GPUs --------------------------------------------------

_SPECULATION = ("mtp_speedup", "spec_acceptance", "num_speculative_tokens")


def _row_scenario(scenario: Scenario, key: str, tp: int, dp: int) -> Scenario:
    """The scenario for another model: its own speculative decoding (the set-up's MTP knobs belong to
    the model chosen) and its own quantisation when the set-up's names the checkpoint's."""
    changes: dict[str, Any] = {"model": key, "tensor_parallel_size": tp, "data_parallel_size": dp,
                               "fills": min(scenario.fills, FRONTIER_FILLS), "calibration": None, "pool_tokens": None}
    changes.update({name: None for name in _SPECULATION})
    return scenario.replace(**changes)


def frontier(scenario: Scenario, progress: Callable[[str], None] | None = None) -> dict:
    """Every catalogue model x split on these GPUs, planned and ranked; ``progress`` hears each model as it starts
    (the page's status line; a callback that raises stops the ranking there)."""
    count = parse_gpus(scenario.gpus, memory=scenario.gpu_memory).count
    rows, refused = [], []
    models = list(load_catalogue())
    for i, key in enumerate(models, 1):
        if progress is not None:
            progress(f"ranking: model {i} of {len(models)} ({key}), every split of {count} GPU(s)")
        for tp in (t for t in range(1, count + 1) if count % t == 0):
            varied = _row_scenario(scenario, key, tp, count // tp)
            try:
                api.memory(varied)  # a cheap refusal first: most of the catalogue does not fit most GPUs
                plan = planned(varied)
            except ServesizeError as exc:
                refused.append({"model": key, "tp": tp, "dp": count // tp, "reason": str(exc).split(";")[0]})
                continue
            r = plan.result
            rows.append({"model": key, "tp": tp, "dp": count // tp, "users": r.values[r.binding], "binding": r.binding,
                         "ceilings": dict(r.values), "warm_p5": float(r.warm.users.p5),
                         "cost_per_month": plan.power.cost_per_month if plan.power is not None else None,
                         "context_shortfall": plan.context_shortfall(),
                         "current": key == scenario.model and (tp, count // tp) == (scenario.tensor_parallel_size,
                                                                                     scenario.data_parallel_size)})
    rows.sort(key=lambda row: (row["context_shortfall"] is not None, -row["users"]))  # rows that cannot hold it last
    return finite({"rows": rows, "refused": refused, "fills": FRONTIER_FILLS,
                   "caption": f"every catalogue model x split on {scenario.gpus}, at {scenario.quantization} weights, this "
                              f"workload and these assumptions ({FRONTIER_FILLS} fills each; each model with its own "
                              "speculative decoding); sorted by the users its binding ceiling allows, the bill at that "
                              "ceiling; a model whose context is shorter than the workload's median is flagged and "
                              "ranked last. Click a row to plan it."})


# -- the what-fits matrix, one GPU type at a time ---------------------------------------------------------

def fit_matrix_column(query: FitQuery, gpu: str) -> dict:
    """The best placement of every catalogue model on ``count`` GPUs of type ``gpu`` (one column)."""
    key = find_gpu(gpu).key
    count = parse_gpus(query.gpus).count
    result = api.fit(replace(query, gpus=f"{count}x{key}", all_placements=False))
    best: dict[str, dict] = {}
    for p in result.placements:
        if not p.chosen:
            continue
        mine = best.get(p.model)
        if mine is None or p.concurrent_total > mine["concurrent_total"]:
            best[p.model] = {"precision": p.precision, "tp": p.tp, "replicas": p.replicas,
                             "concurrent_total": p.concurrent_total}
    return finite({"gpu": key, "count": count, "cells": best})
