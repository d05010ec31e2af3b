"""Aggregated against disaggregated on the same GPUs: for each preset on 2, 4 and 8 H200s, the best xPyD layout
(every split of the GPUs into prefill and decode instances of TP 1, planned) beside the aggregated plan.

    PYTHONPATH=src python scripts/disaggregated_table.py                # the table in docs/disaggregated.md
    PYTHONPATH=src python scripts/disaggregated_table.py --gpus 4 --preset chat
    PYTHONPATH=src python scripts/disaggregated_table.py --engine   # plan beside the engine simulator, best layouts

Each figure is `servesize plan`'s: servesize.api.disaggregated_layouts (every layout's plan_disaggregated) and the
aggregated plan each of them carries. The model is Qwen 3.6 27B in FP8 with an FP8 KV cache, the seed's deployment.
"""

from __future__ import annotations

import argparse

from servesize.api import disaggregated_layouts
from servesize.scenario import Scenario
from servesize.workload.catalogue import preset_names

PRESETS = ("coding-agent", "chat", "rag", "batch")


def row(preset: str, gpus: int) -> str:
    sc = Scenario(model="qwen3.6-27b", gpus=f"{gpus}xH200", quantization="fp8", kv_cache_dtype="fp8", preset=preset)
    plans = disaggregated_layouts(sc)
    best, agg = plans[0], plans[0].aggregated.plans[0]  # one GPU type: one aggregated plan
    a_users = agg.ceilings[agg.binding]
    others = ", ".join(f"{p.layout.name} {p.users:,.0f}" for p in plans[1:])
    more = "aggregated" if a_users >= best.users else best.layout.name
    return (f"| {preset} | {gpus} | {a_users:,.0f} ({agg.binding}), TP {agg.fixed.tp} x DP {agg.fixed.dp} | "
            f"{best.layout.name}: {best.users:,.0f} ({best.binding}, {best.values['decode']:,.0f} decode) | "
            f"{others or '-'} | {more} |")


def _count(users: int | None) -> str:
    return "-" if users is None else f"{users:,}"


def engine_row(preset: str, gpus: int) -> str:
    """The best layout's plan beside the engine simulator with each instance an engine of its own
    (servesize.api.check_disaggregated), and the aggregated plan beside its own engine check."""
    from servesize.api import check_disaggregated, check_plan

    sc = Scenario(model="qwen3.6-27b", gpus=f"{gpus}xH200", quantization="fp8", kv_cache_dtype="fp8", preset=preset)
    best = disaggregated_layouts(sc)[0]
    layout = sc.replace(prefill_instances=best.layout.prefill_instances, decode_instances=best.layout.decode_instances)
    got = check_disaggregated(layout, planned=best)
    aggregated = best.aggregated.plans[0]  # one GPU type: one aggregated plan
    agg = check_plan(sc, planned=aggregated).engine_check or {}
    a_users = aggregated.ceilings[aggregated.binding]

    def gap(c: dict) -> str:
        if c.get("gap") is None:
            return "-"
        return "within 15%" if c["agree"] else f"plan {c['gap']:+.0%}"

    why = got["disagreement"] or ""
    return (f"| {preset} | {gpus} | {best.layout.name}: {best.users:,.0f} ({best.binding}) | "
            f"{'at least ' if got['capped'] else ''}{got['engine_users']:,} ({gap(got)}) | "
            f"{a_users:,.0f} ({aggregated.binding}) | {_count(agg.get('engine_users'))} ({gap(agg)}) | {why} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, action="append", help="H200s (repeat; default 2, 4 and 8)")
    ap.add_argument("--preset", action="append", choices=preset_names(), help="(repeat; default the four)")
    ap.add_argument("--engine", action="store_true", help="the best layout's plan beside the engine simulator")
    args = ap.parse_args()
    if args.engine:
        head = ("| preset | H200s | best disaggregated, plan (binding) | engine simulator | aggregated, plan (binding) "
                "| engine simulator | where the disaggregated plan and its simulator differ by more than 15%, why |")
        make = engine_row
    else:
        head = ("| preset | H200s | aggregated: users (binding), layout | best disaggregated: users (binding, its decode "
                "pool's decode ceiling) | the other layouts | more users |")
        make = row
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for preset in args.preset or PRESETS:
        for gpus in args.gpus or (2, 4, 8):
            print(make(preset, gpus), flush=True)

if __name__ == "__main__":
    main()
