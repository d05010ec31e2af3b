"""The validation table of docs/accuracy.md: plan's users beside the engine simulator's users-at-SLO.

Run:  PYTHONPATH=src .venv/bin/python scripts/engine_validation.py [--traces ../shared/traces] [--out table.md]
(the traces are optional large data outside the clone; see docs/simulate.md for their public sources)
                                   [--only presets|traces] [--json rows.json] [--deployment 27b|moe|tp4]
                                   [--trace claude-code-sessions.jsonl.gz ...]

Three deployments: Qwen 3.6 27B, FP8 weights and KV, one H200 (the one docs/simulate.md plans; ``27b``), a MoE
model (Qwen3-30B-A3B, bf16, one H200; ``moe``) and a dense model at TP 4 (Llama 3.1 70B, FP8 weights and KV, 4 x H100;
``tp4``); seven workloads:
the three shipped traces (each fitted by workload/fit.py, the workload plan --workload and simulate both read)
and the four presets (sessions generated from the preset's workload). Per row: plan's users and the ceiling
that binds, the engine simulator's users at the comfort SLO and what breaks one user later, the gap, and the
plan's one-line reason where they differ by more than 15% (Plan.disagreement). Re-run it after the planner
changes: the plan column is the planner's of the day.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

from servesize.api import simulate_engine
from servesize.errors import BadInput
from servesize.scenario import Scenario
from servesize.simulate.engine import AGREEMENT
from servesize.workload.presets import preset

HERE = pathlib.Path(__file__).resolve().parent
# The traces are optional large data outside the clone (public sources: docs/simulate.md); this default is
# where the project's workspace keeps them, and --traces names another folder.
TRACES = HERE.parent.parent / "shared" / "traces"
DEPLOYMENTS = {
    "27b": dict(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8"),
    "moe": dict(model="qwen3-30b-a3b", gpus="1xH200"),
    "tp4": dict(model="llama-3.1-70b", gpus="4xH100", tensor_parallel_size=4, quantization="fp8", kv_cache_dtype="fp8"),
}
TRACE_FILES = ("claude-code-sessions.jsonl.gz", "mooncake-conversation.jsonl.gz", "mooncake-synthetic.jsonl.gz")
PRESETS = ("coding-agent", "chat", "rag", "batch")
FLAGS = {"27b": "qwen3.6-27b --gpus 1xH200 -q fp8 --kv-cache-dtype fp8", "moe": "qwen3-30b-a3b --gpus 1xH200",
         "tp4": "llama-3.1-70b --gpus 4xH100 --tensor-parallel-size 4 -q fp8 --kv-cache-dtype fp8"}
COMMAND = "servesize simulate {source} {flags} --engine"


def row(label: str, source, scenario: Scenario, command: str, seeds: int = 1) -> dict:
    """One workload: plan's users beside the engine's users at the SLO, the median over ``seeds`` engine runs
    (each its own draw of sessions and pauses: one run's users move by about 10% from seed to seed)."""
    start = time.perf_counter()
    runs = []
    for seed in range(seeds):
        try:
            runs.append(simulate_engine(source, scenario, seed=seed, with_plan=seed == 0))
        except BadInput as exc:
            return {"workload": label, "error": str(exc), "command": command}
    r = runs[0]
    plan = r.plan or {}
    dp = int(plan.get("dp", 1))
    found = [x.found for x in runs if x.found is not None]
    by_seed = [f.users * dp for f in found]
    sim = int(statistics.median_low(by_seed)) if by_seed else None
    middle = next((f for f in found if f.users * dp == sim), None)  # the run whose users are the median's
    users = plan.get("users")
    gap = (users - sim) / sim if sim and users is not None else None
    return {"workload": label, "plan_users": users, "plan_binding": plan.get("binding"), "engine_users": sim,
            "engine_users_by_seed": by_seed,
            "engine_breaks_at": middle.breaks_at * dp if middle and middle.breaks_at else None,
            "engine_reason": middle.reason if middle else "",
            "gap": gap, "agree": gap is not None and abs(gap) <= AGREEMENT,
            "disagreement": r.disagreement, "notes": r.notes,
            "capped": bool(middle and middle.capped), "seconds": time.perf_counter() - start, "command": command}


def rows(traces: pathlib.Path, only: str | None, deployment: str = "27b", seeds: int = 3,
         trace_files: tuple[str, ...] = TRACE_FILES, presets: tuple[str, ...] = PRESETS) -> list[dict]:
    dep = DEPLOYMENTS[deployment]
    out = []
    if only in (None, "traces"):
        for name in trace_files:
            path = traces / name
            if not path.exists():
                print(f"{path} is absent: row skipped", file=sys.stderr)
                continue
            out.append(row(name, str(path), Scenario(**dep),
                           COMMAND.format(source=f"$TRACES/{name}", flags=FLAGS[deployment]), seeds))
            print(json.dumps(out[-1]), file=sys.stderr)
    if only in (None, "presets"):
        for name in presets:
            sc = Scenario(**dep, preset=name)
            command = f"servesize plan {FLAGS[deployment]} --preset {name} --engine-check"
            out.append(row(f"preset {name}", preset(name).workload(), sc, command, seeds))
            print(json.dumps(out[-1]), file=sys.stderr)
    return out


def _first_line(r: dict) -> str:
    if r["plan_users"] is None:
        return "no plan: " + "; ".join(r.get("notes", []))
    return r["disagreement"] or "agree within 15%"


def table(found: list[dict]) -> str:
    """The compact table docs/accuracy.md prints; each row's full first line is in --json (``disagreement``)."""
    lines = ["| workload | plan users (binds) | engine users at SLO (median; by seed) | gap | "
             "one user more, the engine breaks on |",
             "|---|---:|---:|---:|---|"]
    for r in found:
        if "error" in r:
            lines.append(f"| {r['workload']} | | | | {r['error']} |")
            continue
        gap = "" if r["gap"] is None else f"{r['gap']:+.0%}"
        seeds = ", ".join(f"{u:,}" for u in r["engine_users_by_seed"])
        engine = f"{'>= ' if r['capped'] else ''}{r['engine_users']:,} ({seeds})"
        planned = "-" if r["plan_users"] is None else f"{r['plan_users']:,.0f} ({r['plan_binding']})"
        verdict = " (within 15%)" if r["agree"] else ""
        lines.append(f"| {r['workload']} | {planned} | {engine} | {gap}{verdict} | "
                     f"{r['engine_reason'] or _first_line(r)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=pathlib.Path, default=TRACES)
    parser.add_argument("--only", choices=("presets", "traces"), default=None)
    parser.add_argument("--out", type=pathlib.Path, default=None, help="write the markdown table here too")
    parser.add_argument("--json", type=pathlib.Path, default=None, help="write the rows as JSON")
    parser.add_argument("--deployment", choices=sorted(DEPLOYMENTS), default="27b")
    parser.add_argument("--seeds", type=int, default=3, help="engine runs per row, their median users reported")
    parser.add_argument("--trace", action="append", choices=TRACE_FILES, help="only this trace's row (repeat)")
    parser.add_argument("--preset", action="append", choices=PRESETS, help="only this preset's row (repeat)")
    args = parser.parse_args()
    found = rows(args.traces, args.only, args.deployment, args.seeds, tuple(args.trace or TRACE_FILES),
                 tuple(args.preset or PRESETS))
    text = table(found)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    if args.json:
        args.json.write_text(json.dumps(found, indent=2) + "\n")


if __name__ == "__main__":
    main()
