"""Aggregated against disaggregated on the same GPUs: for each preset on 2, 4 and 8 H200s, the best xPyD layout
(every split of the GPUs into prefill and decode instances of TP 1, planned) beside the aggregated plan.

    PYTHONPATH=src python scripts/disaggregated_table.py                # the table in docs/disaggregated.md
    PYTHONPATH=src python scripts/disaggregated_table.py --gpus 4 --preset chat

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
    best, agg = plans[0], plans[0].aggregated
    a_users = agg.ceilings[agg.binding]
    others = ", ".join(f"{p.layout.name} {p.users:,.0f}" for p in plans[1:])
    more = "aggregated" if a_users >= best.users else best.layout.name
    return (f"| {preset} | {gpus} | {a_users:,.0f} ({agg.binding}), TP {agg.fixed.tp} x DP {agg.fixed.dp} | "
            f"{best.layout.name}: {best.users:,.0f} ({best.binding}, {best.values['decode']:,.0f} decode) | "
            f"{others or '-'} | {more} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, action="append", help="H200s (repeat; default 2, 4 and 8)")
    ap.add_argument("--preset", action="append", choices=preset_names(), help="(repeat; default the four)")
    args = ap.parse_args()
    print("| preset | H200s | aggregated: users (binding), layout | best disaggregated: users (binding, its decode "
          "pool's decode ceiling) | the other layouts | more users |")
    print("|---|---|---|---|---|---|")
    for preset in args.preset or PRESETS:
        for gpus in args.gpus or (2, 4, 8):
            print(row(preset, gpus), flush=True)


if __name__ == "__main__":
    main()
