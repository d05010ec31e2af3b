"""servesize measure sessions: simulated agentic users on a ladder of user counts."""

from __future__ import annotations

import argparse
import asyncio

from servesize.errors import BadInput
from servesize.flags import add_params
from servesize.scenario import params_in
from servesize.units import parse_tokens

HELP = "load a live server with simulated agentic users on a ladder"
EPILOG = """\
examples:
  servesize measure sessions --url http://localhost:8000 --predicted-users 86 --duration 300
  servesize measure sessions --url http://localhost:8000 --users 4,8,16 --median 8k --prefix 2k --think-time 10

Each simulated user runs multi-turn sessions (log-normal starting context, growing by the reply and
a new turn, a shared system prefix, optional subagents and invalidation) with think time between
requests. Per rung: warm-hit rate, TTFT of hits and misses, inter-token latency, decode tok/s per
user, preemptions. Workload defaults are the seed's reference workload (servesize.workload.model).
"""


def _users(text: str) -> list[int]:
    try:
        out = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"--users takes a comma list of user counts, e.g. 4,8,16 (not {text!r})") from None
    if not out or out[0] < 1:
        raise argparse.ArgumentTypeError("--users counts must be >= 1")
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", help="the server, e.g. http://localhost:8000")
    p.add_argument("--model", help="model name (default: the server's first /v1/models entry)")
    add_params(p, params_in("workload"))
    s = p.add_argument_group("sessions")
    s.add_argument("--turns-per-session", type=int, default=8)
    s.add_argument("--max-model-len", type=parse_tokens, help="the server's cap (default: /v1/models max_model_len)")
    p.add_argument("--users", type=_users, help="rungs, e.g. 4,8,16")
    p.add_argument("--predicted-users", type=float, help="predicted warm users: the ladder goes x0.5 .. x2 around it")
    p.add_argument("--predicted-decode", type=float, help="predicted decode tok/s per user at the knee (verdict only)")
    p.add_argument("--predict", metavar='"MODEL --gpus ... [plan flags]"',
                   help="take the predictions from `servesize plan` with these arguments and this run's workload "
                        "flags (warm users p50 and the decode speed there)")
    p.add_argument("--duration", type=float, default=120.0, metavar="S", help="seconds per rung (default 120)")
    p.add_argument("--warm-target", type=float, default=0.9, help="warm-hit rate that counts as comfortable (default 0.9)")
    p.add_argument("--max-error-rate", type=float, default=0.05, help="stop the ladder above this error rate (default 0.05)")
    p.add_argument("--max-ttft-p95", type=float, metavar="S", help="stop the ladder when warm-hit TTFT p95 exceeds S seconds")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S", help="per-request total timeout (default 600)")
    p.add_argument("--stall-timeout", type=float, default=60.0, metavar="S", help="longest silence between chunks (default 60)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--record", metavar="FILE", help="the JSONL run record (default: servesize-sessions-<time>.jsonl here)")
    p.add_argument("--resume", metavar="FILE", help="continue the run recorded in FILE (completed rungs are kept)")
    p.add_argument("--fsync", action="store_true")
    p.add_argument("--plot", metavar="FILE.png", help="write warm-hit rate and TTFT vs users")
    p.add_argument("--quiet", action="store_true", help="no progress line on stderr")


def _server_max_model_len(url: str, model: str | None) -> int | None:
    from servesize.measure.client import StreamClient

    async def ask():
        async with StreamClient(url, model) as c:
            entries = await c.models()
            name = model or (entries[0]["id"] if entries else None)
            for e in entries:
                if e.get("id") == name and e.get("max_model_len"):
                    return int(e["max_model_len"])
            return None

    return asyncio.run(ask())


def build_params(args):
    """The simulated users: the same workload the prediction plans for (the seed reference, a
    --workload file, the workload flags), with the server's own cap."""
    from servesize.measure.sessions import SessionParams
    from servesize.resolve import overridden_workload

    workload = overridden_workload(args)
    max_len = args.max_model_len or _server_max_model_len(args.url, args.model) or workload.max_model_len
    return SessionParams.from_workload(workload, max_model_len=max_len, turns_per_session=args.turns_per_session,
                                       seed=args.seed)


def predicted(args) -> tuple[float | None, float | None]:
    """(warm users p50, decode tok/s per user there) from --predict, or the flags given."""
    users, decode = args.predicted_users, args.predicted_decode
    if args.predict and not users:
        from servesize.api import plan
        from servesize.flags import given, scenario_from_flags

        result = plan(scenario_from_flags(args.predict, **given(args, params_in("workload"))), sensitivity=False)
        users = result.warm_users.p50
        if decode is None and result.result.decode.at_ceiling is not None:
            decode = result.result.decode.at_ceiling.p50_tok_s
    return users, decode


def measure(args, rec):
    """Run (or continue) the ladder described by ``args`` into the record ``rec``."""
    from servesize.commands._measure import open_record, run_recorded
    from servesize.measure.sessions import SessionsConfig, ladder, measure_sessions

    def new_config():
        users, decode = predicted(args)
        if args.users:
            rungs = args.users
        elif users:
            rungs = ladder(users)
        else:
            raise BadInput("measure sessions needs --users 4,8,16 or --predicted-users N")
        return SessionsConfig(url=args.url, params=build_params(args), users=rungs, model=args.model,
                              duration_s=args.duration, warm_target=args.warm_target, max_error_rate=args.max_error_rate,
                              max_ttft_p95_s=args.max_ttft_p95, timeout_s=args.timeout, stall_timeout_s=args.stall_timeout,
                              predicted_users=users, predicted_decode_tok_per_s=decode)

    cfg, record, contents = open_record(rec, "sessions", SessionsConfig, new_config)
    return run_recorded(rec, record, lambda progress: measure_sessions(cfg, record=record, resume=contents,
                                                                      progress=progress))


def run(args):
    from servesize.commands._measure import Recording

    result = measure(args, Recording.of(args))
    if args.plot:
        from servesize.measure.plots import plot_sessions

        plot_sessions(result, args.plot)
    return result
