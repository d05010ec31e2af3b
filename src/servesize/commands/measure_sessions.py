"""servesize measure sessions: simulated agentic users on a ladder of user counts."""

from __future__ import annotations

import argparse
import asyncio

from servesize.commands._types import counts
from servesize.errors import BadInput
from servesize.flags import add_params
from servesize.scenario import params_in

EPILOG = """\
examples:
  servesize measure sessions --url http://localhost:8000 --predicted-users 86 --duration 300
  servesize measure sessions --url http://localhost:8000 --users 4,8,16 --median 8k --prefix 2k --think-time 10

Each simulated user runs multi-turn sessions (log-normal starting context, growing by the reply and
a new turn, a shared system prefix, optional subagents and invalidation) with think time between
requests. Per rung: warm-hit rate, TTFT of hits and misses, inter-token latency, decode tok/s per
user, preemptions. Workload defaults are the seed's reference workload (servesize.workload.model).
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    from servesize.commands._measure import add_common, add_flag
    from servesize.measure.sessions import MAX_RUNGS, MAX_USERS

    rungs = counts(MAX_RUNGS, 1, MAX_USERS)

    p.add_argument("--url", help="the server, e.g. http://localhost:8000, or its replicas as a comma list "
                                 "(http://a:8000,http://b:8000): each request goes to the one --routing picks")
    p.add_argument("--routing", choices=["sticky", "per-request"], default="sticky",
                   help="with several --url endpoints: 'sticky' sends every request of user u to endpoint u mod E (a "
                        "session-affine router); 'per-request' sends a user's k-th request to endpoint (u + k) mod E (a "
                        "router that spreads one user's turns) (default sticky)")
    p.add_argument("--model", help="model name (default: the server's first /v1/models entry)")
    add_params(p, params_in("workload"))
    s = p.add_argument_group("sessions")
    add_flag(s, "turns_per_session", 8)
    add_flag(s, "max_model_len")
    p.add_argument("--users", type=lambda text: sorted(set(rungs(text))), help="rungs, e.g. 4,8,16 (1 to 64 counts, each in [1, 100,000])")
    add_flag(p, "predicted_users")
    add_flag(p, "predicted_decode")
    p.add_argument("--predict", metavar='"MODEL --gpus ... [plan flags]"',
                   help="take the predictions from `servesize plan` with these arguments and this run's workload "
                        "flags (warm users p50 and the decode speed there)")
    add_flag(p, "duration", 120.0)
    add_flag(p, "requests_per_user")
    add_flag(p, "warm_target", 0.9)
    add_flag(p, "max_error_rate", 0.05)
    add_flag(p, "max_ttft_p95")
    add_flag(p, "workers")
    p.add_argument("--ray-address", metavar="HOST:PORT",
                   help="with --workers: the Ray cluster the workers run on (started with `ray start --head` there, other "
                        "hosts attached with `ray start --address HOST:PORT`; default: a Ray started on this machine)")
    add_common(p, "sessions", "continue the run recorded in FILE (measured rungs are kept; failed ones are measured again)")
    p.add_argument("--plot", metavar="FILE.png", help="write warm-hit rate and TTFT vs users")
    p.add_argument("--quiet", action="store_true", help="no progress line on stderr")


def _server_max_model_len(url: str, model: str | None) -> int | None:
    from servesize.measure.client import StreamClient

    async def ask():
        async with StreamClient(url, model) as c:
            entries = await c.models()
            name = model or (entries[0]["id"] if entries else None)
            for e in entries:
                cap = e.get("max_model_len")
                # a whole, positive count only: anything else (a string, inf, 1e400) falls back as a missing one does
                if e.get("id") == name and isinstance(cap, int) and not isinstance(cap, bool) and cap > 0:
                    return cap
            return None

    return asyncio.run(ask())


def build_params(args):
    """The simulated users: the same workload the prediction plans for (the seed reference, a
    --workload file, the workload flags), with the server's own cap."""
    from servesize.flags import given
    from servesize.measure.sessions import SessionParams
    from servesize.resolve.workload import overridden_workload
    from servesize.scenario import WorkloadFields

    workload = overridden_workload(WorkloadFields(**given(args, params_in("workload"))))
    first = args.url.split(",")[0].strip()  # replicas serve the same model: the first one answers for all
    max_len = args.max_model_len or _server_max_model_len(first, args.model) or workload.max_model_len
    return SessionParams.from_workload(workload, max_model_len=max_len, turns_per_session=args.turns_per_session,
                                       seed=args.seed)


def predicted(args) -> tuple[float | None, float | None, str | None]:
    """(warm users p50, decode tok/s per user there, where they came from) from --predict, or the flags given."""
    users, decode = args.predicted_users, args.predicted_decode
    source = "given as --predicted-users" if users else None
    if args.predict and not users:
        source = f"`servesize plan {args.predict}` with this run's workload flags"
        from servesize.api import plan
        from servesize.flags import given, scenario_from_flags

        result = plan(scenario_from_flags(args.predict, **given(args, params_in("workload"))), sensitivity=False)
        users = result.warm_users.p50
        if decode is None and result.result.decode.at_ceiling is not None:
            decode = result.result.decode.at_ceiling.p50_tok_s
    return users, decode, source


def config_maker(args):
    """A function making the SessionsConfig the flags describe (it may ask the server and run the planner)."""
    from servesize.measure.sessions import SessionsConfig, ladder

    def new_config():
        users, decode, source = predicted(args)
        if args.users:
            rungs = args.users
        elif users:
            rungs = ladder(users)
        else:
            raise BadInput("measure sessions needs --users 4,8,16 or --predicted-users N")
        return SessionsConfig(url=args.url, params=build_params(args), users=rungs, model=args.model,
                              duration_s=args.duration, warm_target=args.warm_target, max_error_rate=args.max_error_rate,
                              max_ttft_p95_s=args.max_ttft_p95, timeout_s=args.timeout, stall_timeout_s=args.stall_timeout,
                              predicted_users=users, predicted_decode_tok_per_s=decode,
                              requests_per_user=args.requests_per_user, predicted_source=source, routing=args.routing)

    return new_config


def measure(args, rec):
    """Run (or continue) the ladder described by ``args`` into the record ``rec``."""
    from servesize.commands._measure import open_record, run_recorded
    from servesize.measure.sessions import SessionsConfig, measure_sessions

    workers = make_workers(args)
    cfg, record, contents = open_record(rec, "sessions", SessionsConfig, config_maker(args))
    return run_recorded(rec, record, lambda progress: measure_sessions(cfg, record=record, resume=contents,
                                                                      progress=progress, workers=workers))


def make_workers(args):
    """The Ray workers --workers asks for (None: every user in this process); Ray is the optional extra [ray]."""
    if args.ray_address and not args.workers:
        raise BadInput("--ray-address needs --workers N (how many workers to run on that cluster)")
    if not args.workers:
        return None
    try:
        from servesize.measure.distributed import RayWorkers
    except ImportError as exc:
        raise BadInput(f"--workers needs Ray ({exc.name or exc}): pip install 'servesize[ray]'") from None
    return RayWorkers(args.workers, address=args.ray_address)


def run(args):
    from servesize.commands._measure import Recording

    result = measure(args, Recording.of(args))
    if args.plot:
        from servesize.measure.plots import plot_sessions

        plot_sessions(result, args.plot)
    return result
