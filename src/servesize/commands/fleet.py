"""servesize fleet --users N --models LIST: the cheapest fleet for N users, or for several teams (--team)."""

from __future__ import annotations

import sys
from typing import Any

from servesize.frozen import frozen

EPILOG = """\
examples:
  servesize fleet --users 400 --models qwen3.6-27b
  servesize fleet --users 400 --models qwen3.6-27b --gpus-from H100,H200,L40S --max-gpus 32 --plot fleet.png
  servesize fleet --users 400 --models qwen3.6-27b,qwen3.6-35b-a3b --gpu-hour-price H200=3.10 --currency USD
  servesize fleet --models qwen3.6-27b --gpus-from H200 --team agents=120:coding-agent --team support=300:chat \\
      --team research=40:rag
  servesize fleet --users 200 --models llama-3.1-8b --preset chat --no-price-includes-power \\
      --gpu-hour-price L40S=0.60 --electricity-price 0.12 --currency USD     owned GPUs plus their power bill

Every fleet listed keeps the users warm at p5 and every other ceiling (decode, latency, saturation) at N;
each is a replica shape (TP GPUs, one pool) times DP replicas. GPU-hour prices are on-demand rentals from
data/prices.toml (provider, source and date per GPU; rentals include the power); --gpu-hour-price gives
your own. DP replicas need a session-sticky (cache-aware) router for their warm users to add up: vLLM's
own DP balancer routes by queue depth only (--no-sticky-routing plans for that). The winner comes with
the `servesize plan` line that confirms it.

Teams share one pool under LRU (a team's requests enter it in proportion to its request rate, so
long-session teams evict short-session ones) and one prefill queue (--priority NAME=LEVEL: served
first); the output compares that with each team on replicas of its own.
"""


def add_arguments(parser) -> None:
    from servesize.flags import add_params
    from servesize.fleet_query import FLEET_PARAMS, FleetQuery
    from servesize.scenario import GROUPS

    single = [p for p in FLEET_PARAMS.values() if p.kind != "list"]
    add_params(parser, single, required=("models",), declared_by=FleetQuery)
    repeated = parser.add_argument_group(GROUPS["fleet"] + " (repeatable)")
    for p in FLEET_PARAMS.values():
        if p.kind == "list":
            repeated.add_argument(p.flag, *p.flags, dest=p.name, action="append", default=None, metavar=p.metavar,
                                  help=p.full_help().replace("%", "%%"))
    out = parser.add_argument_group("output")
    out.add_argument("--plot", metavar="FILE.png", help="write the cost-users frontier as a PNG (matplotlib)")


@frozen
class FleetOutput:
    """What ``servesize fleet`` prints: the search's answer, and the plot when asked for."""

    result: Any
    plot: str | None = None

    @property
    def exit_code(self) -> int:
        return self.result.exit_code

    @property
    def failure(self) -> str | None:
        return self.result.failure

    def to_dict(self) -> dict:
        out = self.result.to_dict()
        if self.plot:
            out["plot"] = self.plot
        return out

    def render(self, explain: bool = False) -> str:
        from servesize.render.text import render_text

        text = render_text(self.result, explain)
        return text + (f"\nplot written to {self.plot}" if self.plot else "")


def run(args):
    from servesize.api import fleet
    from servesize.flags import given
    from servesize.fleet_query import FLEET_PARAMS, FleetQuery

    query = FleetQuery(**given(args, FLEET_PARAMS.values()))

    def progress(line: str) -> None:
        if not args.json:
            print(f"servesize: {line}", file=sys.stderr)

    result = fleet(query, progress=progress)
    written = None
    if args.plot:
        from servesize.render.plots import plot_fleet

        written = plot_fleet(result, args.plot)
    return FleetOutput(result, written)
