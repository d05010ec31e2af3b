"""servesize plan MODEL --gpus ...: warm users, decode, latency, saturation; the binding ceiling and the recipe."""

from __future__ import annotations

import sys
from typing import Any

from servesize.flags import add_params, scenario_from_args
from servesize.frozen import frozen
from servesize.scenario import GROUPS

EPILOG = """\
examples:
  servesize plan qwen3.6-27b --gpus 1xH200 -q fp8 --kv-cache-dtype fp8 --median 31k
  servesize plan qwen3.6-27b --gpus 1xH200 -q fp8 --kv-cache-dtype fp8 --pool-tokens 2.77m \\
      --state-dtype bfloat16 --assumptions seed          the seed's headline (86 warm users p50)
  servesize plan qwen3.6-27b --gpus 2xH200 -tp 2 -q fp8 --kv-cache-dtype fp8 --sweep median=31k,45k,60k,80k
  servesize plan qwen3.6-27b --gpus 1xH200 -q fp8 --workload my-workload.toml --think-time 43 --plot plan.png
  servesize plan llama-3.1-8b --gpus 4xH100 -dp 4 --cpu-offload-gib 200 --json
  servesize plan llama-3.3-70b --gpus 8xH100                   every GPU: servesize chooses TP x DP (the first line says why)
  servesize plan qwen3.6-27b --gpus 4xH200 -q fp8 --kv-cache-dtype fp8 --prefill-instances 1 --decode-instances 3
                  prefill and decode apart (NixlConnector): the layout's users beside the aggregated plan

A workload is a preset (--preset coding-agent, the default: the warm-capacity seed's reference
workload; chat, rag, batch; data/workloads.toml gives each field's source), then the fields a
--workload FILE fitted from your logs, then single flags; the plan's first lines say which. A prefix
at or above the median session is refused. --max-model-len is both the engine's flag and the
workload's cap (default: the workload's, at most the model's own context).

Decode is the longer of memory and compute time per step (MTP verification included); the plan
shows the speed at one user and at the recommended --max-num-seqs, and when one user alone misses
the floor it says so and sizes the batch at 80% of that best speed.

  servesize plan llama-3.1-8b --gpus 1xL40S --preset chat
  servesize plan llama-3.1-8b --gpus 1xH100 --median 2k --prefix 300 --max-model-len 32k
  servesize plan qwen3.6-27b --gpus 1xH200 -q fp8 --electricity-price 0.12 --currency USD --pue 1.3
  servesize plan qwen3.6-27b --gpus 2xH200 -dp 2 -q fp8 --kv-cache-dtype fp8 \\
      --team agents=40 --team support=150:chat --priority support=1      several teams on one deployment
"""


def add_arguments(parser) -> None:
    add_params(parser, (p for group in GROUPS if group != "fit" for p in _params(group)), required=("gpus",))
    teams = parser.add_argument_group("teams (several teams sharing this deployment)")
    teams.add_argument("--team", action="append", metavar="NAME=USERS[:WORKLOAD]",
                       help="a team on this deployment (WORKLOAD: a preset name or a workload file; default the "
                            "workload above); repeat per team: each team's warm users sharing the pool under LRU "
                            "and alone on it, its ceilings and miss TTFT, and whether sharing or splitting the "
                            "replicas needs fewer")
    teams.add_argument("--priority", action="append", metavar="NAME=LEVEL",
                       help="a team's prefill-queue priority (higher first; default 0 for all); repeat per team")
    out = parser.add_argument_group("output")
    out.add_argument("--sweep", metavar="PARAM=V1,V2,...",
                     help="e.g. median=31k,45k,60k or prefix=3k,15k,30k or mfu=0.3,0.45,0.6")
    out.add_argument("--plot", metavar="FILE.png", help="write a 2x2 figure (matplotlib)")
    out.add_argument("--no-sensitivity", action="store_true", help="skip the sensitivity scan (faster)")
    out.add_argument("--engine-check", action="store_true",
                     help="also run the engine simulator (vLLM's scheduler step by step) on sessions generated from "
                          "the workload and find its users at the comfort SLO; the plan says whether they agree "
                          "within 15%% and, where not, why (--json: engine_check). Seconds to minutes")


def _params(group: str):
    from servesize.scenario import params_in

    return params_in(group)


@frozen
class PlanOutput:
    """What ``servesize plan`` prints: the plan, and the sweep and plot when asked for."""

    plan: Any
    sweep: dict | None = None
    plot: str | None = None

    def to_dict(self) -> dict:
        out = self.plan.to_dict()
        if self.sweep is not None:
            out["sweep"] = self.sweep
        if self.plot:
            out["plot"] = self.plot
        return out

    def render(self, explain: bool = False) -> str:
        from servesize.render.text import render_sweep, render_text

        lines = [render_text(self.plan, explain)]
        if self.sweep is not None:
            lines.append(render_sweep(self.sweep))
        if self.plot:
            lines.append(f"plot written to {self.plot}")
        return "\n".join(lines)


def _sweep_of(text: str) -> tuple[str, list[str]]:
    from servesize.errors import BadInput

    if "=" not in text:
        raise BadInput("--sweep takes PARAM=V1,V2,... e.g. median=31k,45k,60k")
    param, _, rest = text.partition("=")
    return param, [v.strip() for v in rest.split(",") if v.strip()]


def _disaggregated(scenario, args):
    from servesize.api import plan_disaggregated
    from servesize.errors import BadInput

    other = [flag for flag, on in (("--team", args.team), ("--sweep", args.sweep), ("--plot", args.plot)) if on]
    if other:
        raise BadInput(f"{', '.join(other)} plan(s) an aggregated deployment; a disaggregated layout "
                       "(--prefill-instances, --decode-instances) is planned without them")

    def progress(line: str) -> None:
        if not args.json:
            print(f"servesize: {line}", file=sys.stderr)

    planned = plan_disaggregated(scenario, progress=progress)
    if args.engine_check:
        from dataclasses import replace

        from servesize.api import check_disaggregated

        planned = replace(planned, engine_check=check_disaggregated(scenario, planned=planned, progress=progress))
    return planned


def run(args):
    from servesize.api import check_plan, plan, sweep, sweep_values, teams
    from servesize.errors import BadInput

    scenario = scenario_from_args(args)
    if scenario.disaggregated:
        return _disaggregated(scenario, args)
    if args.priority and not args.team:
        raise BadInput("--priority ranks teams: name them with --team NAME=USERS[:WORKLOAD]")
    if args.team:
        if args.sweep or args.plot or args.engine_check:
            raise BadInput("--team answers for the teams on this deployment; --sweep, --plot and --engine-check plan "
                           "one workload")
        return teams(scenario, args.team, args.priority)
    swept = _sweep_of(args.sweep) if args.sweep else None
    if swept:
        sweep_values(*swept)  # a bad sweep is refused before the long work

    def progress(line: str) -> None:
        if not args.json:
            print(f"servesize: {line}", file=sys.stderr)

    result = plan(scenario, sensitivity=not args.no_sensitivity, progress=progress)
    if args.engine_check:
        result = check_plan(scenario, progress=progress, planned=result)
    table = sweep(scenario, *swept) if swept else None
    written = None
    if args.plot:
        from servesize.render.plots import plot_plan

        written = plot_plan(result, args.plot)
    return PlanOutput(result, table, written)
