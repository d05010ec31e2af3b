"""servesize measure server: the pool, then the warm-capacity ladder, each beside servesize's prediction."""

from __future__ import annotations

import argparse
import pathlib
import time
from dataclasses import dataclass

from servesize.commands import measure_sessions
from servesize.errors import BadInput
from servesize.units import parse_tokens

HELP = "measure a live server end to end: its KV pool, then the warm-capacity ladder, against the prediction"
EPILOG = """\
examples:
  servesize measure server --url http://localhost:8000 \\
      --predict "qwen3.6-27b -q fp8 --gpus 1xH200 --kv-cache-dtype fp8 --max-model-len 180k" --median 31k

One command for what `measure pool --predict` and `measure sessions --predict` do one after the other:
--predict holds the served model and its vLLM flags (the arguments of `servesize memory`); the
workload flags here describe the simulated users and go to `servesize plan` too, so the ladder is
placed around the predicted warm users. Both run records go to --record-dir; run the same command
again with the same --record-dir to continue an interrupted run.
"""

WORKLOAD_FLAGS = ("median", "sigma", "prefix", "subagent_ratio", "subagent_median", "subagent_sigma", "subagent_prefix",
                  "invalidation", "think_time", "output_tokens")


def add_arguments(p: argparse.ArgumentParser) -> None:
    measure_sessions.add_arguments(p)
    g = p.add_argument_group("pool measurement")
    g.add_argument("--prompt-tokens", type=parse_tokens, default=4097, metavar="S", help="tokens per pool prompt (default 4097)")
    g.add_argument("--rounds", type=int, default=3, metavar="R", help="rounds per pool probe (default 3)")
    p.add_argument("--record-dir", metavar="DIR", help="where both run records go (default: servesize-server-<time>/)")


@dataclass
class ServerReport:
    pool: object
    sessions: object
    exit_code: int = 0

    def to_dict(self) -> dict:
        return {"pool": self.pool.to_dict(), "sessions": self.sessions.to_dict()}

    def render(self, explain: bool = False) -> str:
        from servesize.measure.report import render_pool, render_sessions

        return "\n".join([render_pool(self.pool, explain), "", render_sessions(self.sessions, explain)])


def _plan_arguments(args) -> str:
    extra = []
    for name in WORKLOAD_FLAGS:
        value = getattr(args, name, None)
        if value is not None:
            extra += [f"--{name.replace('_', '-')}", str(value)]
    return " ".join([args.predict, *extra])


def run(args):
    from servesize.cli import build_parser
    from servesize.commands import measure_pool

    if not args.url:
        raise BadInput("measure server needs --url")
    if not args.predict:
        raise BadInput('measure server needs --predict "MODEL --gpus ... [vLLM flags]" (the served model and its flags)')
    folder = pathlib.Path(args.record_dir or time.strftime("servesize-server-%Y%m%d-%H%M%S"))
    folder.mkdir(parents=True, exist_ok=True)
    pool_record, sessions_record = folder / "pool.jsonl", folder / "sessions.jsonl"
    # a --record-dir that already holds records continues them (the run was interrupted)
    pool_argv = ["measure", "pool", "--url", args.url, "--predict", args.predict, "--prompt-tokens", str(args.prompt_tokens),
                 "--rounds", str(args.rounds), "--resume" if pool_record.exists() else "--record", str(pool_record)]
    if args.model:
        pool_argv += ["--model", args.model]
    if args.quiet:
        pool_argv.append("--quiet")
    pool = measure_pool.run(build_parser(load="measure pool").parse_args(pool_argv))
    args.predict = _plan_arguments(args)
    if sessions_record.exists():
        args.resume = str(sessions_record)
    else:
        args.record = str(sessions_record)
    sessions = measure_sessions.run(args)
    return ServerReport(pool, sessions, max(getattr(pool, "exit_code", 0), getattr(sessions, "exit_code", 0)))
