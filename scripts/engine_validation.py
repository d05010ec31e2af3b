"""The validation table of docs/accuracy.md: plan's users beside the engine simulator's users-at-SLO.

Run:  PYTHONPATH=src .venv/bin/python scripts/engine_validation.py [--traces ../shared/traces] [--out table.md]
(the traces are optional large data outside the clone; see docs/simulate.md for their public sources)
                                                                  [--only presets|traces] [--json rows.json]

One deployment (Qwen 3.6 27B, FP8 weights and KV, one H200: the one docs/simulate.md plans), seven workloads:
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
import sys
import time

from servesize.api import simulate_engine
from servesize.errors import BadInput
from servesize.scenario import Scenario
from servesize.workload.presets import preset

HERE = pathlib.Path(__file__).resolve().parent
# The traces are optional large data outside the clone (public sources: docs/simulate.md); this default is
# where the project's workspace keeps them, and --traces names another folder.
TRACES = HERE.parent.parent / "shared" / "traces"
DEPLOYMENT = dict(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8")
TRACE_FILES = ("claude-code-sessions.jsonl.gz", "mooncake-conversation.jsonl.gz", "mooncake-synthetic.jsonl.gz")
PRESETS = ("coding-agent", "chat", "rag", "batch")
COMMAND = ("servesize simulate {source} qwen3.6-27b --gpus 1xH200 -q fp8 --kv-cache-dtype fp8 --engine{extra}")


def row(label: str, source, scenario: Scenario, command: str) -> dict:
    start = time.perf_counter()
    try:
        r = simulate_engine(source, scenario)
    except BadInput as exc:
        return {"workload": label, "error": str(exc), "command": command}
    found, plan = r.found, r.plan or {}
    sim = found.users * int(plan.get("dp", 1)) if found else None
    users = plan.get("users")
    return {"workload": label, "plan_users": users, "plan_binding": plan.get("binding"), "engine_users": sim,
            "engine_breaks_at": found.breaks_at if found else None, "engine_reason": found.reason if found else "",
            "gap": (users - sim) / sim if sim and users is not None else None, "disagreement": r.disagreement,
            "notes": r.notes,
            "capped": found.capped if found else False, "seconds": time.perf_counter() - start, "command": command}


def rows(traces: pathlib.Path, only: str | None) -> list[dict]:
    out = []
    if only in (None, "traces"):
        for name in TRACE_FILES:
            path = traces / name
            if not path.exists():
                print(f"{path} is absent: row skipped", file=sys.stderr)
                continue
            out.append(row(name, str(path), Scenario(**DEPLOYMENT), COMMAND.format(source=f"$TRACES/{name}", extra="")))
            print(json.dumps(out[-1]), file=sys.stderr)
    if only in (None, "presets"):
        for name in PRESETS:
            sc = Scenario(**DEPLOYMENT, preset=name)
            command = (f"python -c 'from servesize.api import check_plan; from servesize.scenario import Scenario; "
                       f"print(check_plan(Scenario(model=\"qwen3.6-27b\", gpus=\"1xH200\", quantization=\"fp8\", "
                       f"kv_cache_dtype=\"fp8\", preset=\"{name}\")).disagreement)'")
            out.append(row(f"preset {name}", preset(name).workload(), sc, command))
            print(json.dumps(out[-1]), file=sys.stderr)
    return out


def _first_line(r: dict) -> str:
    if r["plan_users"] is None:
        return "no plan: " + "; ".join(r.get("notes", []))
    return r["disagreement"] or "agree within 15%"


def table(found: list[dict]) -> str:
    """The compact table docs/accuracy.md prints; each row's full first line is in --json (``disagreement``)."""
    lines = ["| workload | plan users (binds) | engine users at SLO | gap | one user more, the engine breaks on |",
             "|---|---:|---:|---:|---|"]
    for r in found:
        if "error" in r:
            lines.append(f"| {r['workload']} | | | | {r['error']} |")
            continue
        gap = "" if r["gap"] is None else f"{r['gap']:+.0%}"
        engine = f"{'>= ' if r['capped'] else ''}{r['engine_users']:,}"
        planned = "-" if r["plan_users"] is None else f"{r['plan_users']:,.0f} ({r['plan_binding']})"
        verdict = "" if r["plan_users"] is None else (" (within 15%)" if not r["disagreement"] else "")
        lines.append(f"| {r['workload']} | {planned} | {engine} | {gap}{verdict} | "
                     f"{r['engine_reason'] or _first_line(r)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=pathlib.Path, default=TRACES)
    parser.add_argument("--only", choices=("presets", "traces"), default=None)
    parser.add_argument("--out", type=pathlib.Path, default=None, help="write the markdown table here too")
    parser.add_argument("--json", type=pathlib.Path, default=None, help="write the rows as JSON")
    args = parser.parse_args()
    found = rows(args.traces, args.only)
    text = table(found)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    if args.json:
        args.json.write_text(json.dumps(found, indent=2) + "\n")


if __name__ == "__main__":
    main()
