"""servesize measure sessions: simulated agentic users on a ladder of user counts."""

from __future__ import annotations

import argparse
import asyncio

from servesize.errors import BadInput
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
    g = p.add_argument_group("workload (defaults: the seed's reference workload)")
    g.add_argument("--median", type=parse_tokens, help="median session context, tokens (e.g. 31k)")
    g.add_argument("--sigma", type=float, help="log-normal sigma of session contexts")
    g.add_argument("--prefix", type=parse_tokens, help="shared system prefix of user sessions, tokens")
    g.add_argument("--subagent-ratio", type=float, help="subagent requests per user request (0: none)")
    g.add_argument("--subagent-median", type=parse_tokens)
    g.add_argument("--subagent-sigma", type=float)
    g.add_argument("--subagent-prefix", type=parse_tokens)
    g.add_argument("--invalidation", type=float, help="share of turns that match no cached prefix")
    g.add_argument("--think-time", type=float, help="mean seconds between a user's requests (exponential)")
    g.add_argument("--output-tokens", type=parse_tokens, help="tokens generated per request")
    g.add_argument("--turn-tokens", type=parse_tokens, help="new tokens appended per turn")
    g.add_argument("--turns-per-session", type=int, default=8)
    g.add_argument("--max-model-len", type=parse_tokens, help="the server's cap (default: /v1/models max_model_len)")
    p.add_argument("--users", type=_users, help="rungs, e.g. 4,8,16")
    p.add_argument("--predicted-users", type=float, help="predicted warm users: the ladder goes x0.5 .. x2 around it")
    p.add_argument("--predicted-decode", type=float, help="predicted decode tok/s per user at the knee (verdict only)")
    p.add_argument("--predict", metavar='"MODEL --gpus ... [plan flags]"',
                   help="take the predictions from `servesize plan` with these arguments (warm users p50 and the "
                        "decode speed there); give it the same workload flags as this run")
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
    from servesize.measure.sessions import ClassParams, SessionParams

    try:
        from servesize.workload.model import Workload

        base = SessionParams.from_workload(Workload.seed_reference())
    except ImportError:  # pragma: no cover - the workload module is part of the package
        base = SessionParams(user=ClassParams(31_000, 0.81, 15_000))
    u = base.user
    user = ClassParams(args.median or u.median_tokens, u.sigma if args.sigma is None else args.sigma,
                       u.prefix_tokens if args.prefix is None else args.prefix)
    s = base.subagent or ClassParams(8_000, 0.9, 3_000)
    sub = ClassParams(args.subagent_median or s.median_tokens, s.sigma if args.subagent_sigma is None else args.subagent_sigma,
                      s.prefix_tokens if args.subagent_prefix is None else args.subagent_prefix)
    max_len = args.max_model_len or _server_max_model_len(args.url, args.model) or base.max_model_len

    def pick(value, default):
        return default if value is None else value

    return SessionParams(user=user, subagent=sub, subagent_ratio=pick(args.subagent_ratio, base.subagent_ratio),
                         invalidation=pick(args.invalidation, base.invalidation), max_model_len=max_len,
                         think_time_s=pick(args.think_time, base.think_time_s),
                         output_tokens=pick(args.output_tokens, base.output_tokens),
                         turn_tokens=pick(args.turn_tokens, base.turn_tokens), turns_per_session=args.turns_per_session,
                         seed=args.seed)


def run(args):
    from servesize.commands._measure import open_record, run_recorded
    from servesize.measure.plots import plot_sessions
    from servesize.measure.sessions import SessionsConfig, ladder, measure_sessions

    def new_config():
        if args.predict and not args.predicted_users:
            from servesize.commands._predict import predict_plan

            plan = predict_plan(args.predict).to_dict()
            args.predicted_users = plan["warm_users"]["p50"]
            if args.predicted_decode is None:
                args.predicted_decode = plan["decode"]["p50_at_ceiling_tok_s"]
        if args.users:
            users = args.users
        elif args.predicted_users:
            users = ladder(args.predicted_users)
        else:
            raise BadInput("measure sessions needs --users 4,8,16 or --predicted-users N")
        return SessionsConfig(url=args.url, params=build_params(args), users=users, model=args.model,
                              duration_s=args.duration, warm_target=args.warm_target, max_error_rate=args.max_error_rate,
                              max_ttft_p95_s=args.max_ttft_p95, timeout_s=args.timeout, stall_timeout_s=args.stall_timeout,
                              predicted_users=args.predicted_users, predicted_decode_tok_per_s=args.predicted_decode)

    cfg, record, contents = open_record(args, "sessions", SessionsConfig, new_config)
    result = run_recorded(args, record, lambda progress: measure_sessions(cfg, record=record, resume=contents,
                                                                          progress=progress))
    if args.plot:
        plot_sessions(result, args.plot)
    return result
