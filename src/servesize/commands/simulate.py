"""``servesize simulate TRACE [MODEL --gpus ... | --pool-tokens N]``: replay a trace through vLLM's prefix cache."""

from __future__ import annotations

import argparse
import sys
import time

from servesize.commands._types import counts, fraction, whole
from servesize.errors import BadInput
from servesize.flags import add_params, scenario_from_args
from servesize.limits import MAX_ENGINE_USERS, MAX_REPLAY_USERS, MAX_SYNTHETIC_SESSIONS
from servesize.scenario import PARAMS, params_in
from servesize.units import parse_tokens

EPILOG = """\
traces (detected from the content; .gz allowed):
  Claude Code sessions (kv-cache-tester: requests[].hash_ids, 64-token blocks), Mooncake / hash JSONL
  (hash_ids, input_length; 512-token blocks unless the records say), OpenAI-style logs (usage.prompt_tokens,
  cached_tokens: ids made from append-only sessions), a `servesize measure sessions` record, or a workload
  file (`servesize workload fit --out`): sessions are generated from it.

the pool: MODEL --gpus ... with vLLM's flags (the pool `servesize memory` computes), or --pool-tokens N
(the engine's KV cache size, in --block-size blocks, default the trace's). Without either: the curve only.

what every figure depends on, and is stated beside it: --requests (main: a session's own requests, as the
published curves), --align (t0: every session at time 0; stagger; trace: the trace's clock), --warmup
(the first half is not counted, as the published curves), --users, --service (the exact replay's service
times: trace, model, none). See docs/simulate.md for what each definition of hit rate gives.

examples:
  servesize simulate claude-code-sessions.jsonl.gz --pool-tokens 1.28M --plot cc.png
  servesize simulate claude-code-sessions.jsonl.gz qwen3.6-27b --gpus 1xH200 -q fp8 --kv-cache-dtype fp8
  servesize simulate mooncake-conversation.jsonl.gz --pool-tokens 2M --json
  servesize simulate requests.jsonl --pool-tokens 500k --block-size 16     (an OpenAI-style log)
  servesize simulate sessions.jsonl --pool-tokens 32768 --block-size 32   (a measure sessions record)
  servesize simulate claude-code-sessions.jsonl.gz qwen3.6-27b --gpus 1xH200 -q fp8 --kv-cache-dtype fp8 --engine
                                                  (vLLM's scheduler at N users: users at the comfort SLO beside plan)
"""


# The cache replay's own flags: the engine simulator takes none of them, and says so by name when one is given.
REPLAY_ONLY = {"curves_for_users": ("--curves-for-users", ()), "service": ("--service", None),
               "output_blocks": ("--no-output-blocks", True), "exact": ("--no-exact", True),
               "bounds": ("--no-bounds", True), "target_hit_rate": ("--target-hit-rate", None)}
MAX_TRACE_BLOCK_SIZE = 1 << 20  # tokens per hash id: past any context a trace records (Mooncake's are 512)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", metavar="TRACE", help="the trace file (or a workload file to generate sessions from)")
    model = PARAMS["model"]
    parser.add_argument("model", nargs="?", default=None, type=model.parse, metavar="MODEL",
                        help=model.help + "; with --gpus, the pool is the one vLLM builds for it")
    # the deployment (MODEL is a positional of its own; --users here is the replay's, not plan's fleet sizing)
    add_params(parser, [p for p in params_in("model", "engine") if p.name not in ("model", "users")])
    g = parser.add_argument_group("the replay")
    g.add_argument("--pool-tokens", type=parse_tokens, default=None, metavar="TOKENS",
                   help="the pool as the engine's KV cache size in tokens (instead of, or overriding, MODEL's)")
    g.add_argument("--requests", choices=("main", "all"), default=None,
                   help="main: each session's own requests (the published curves); all: subagents too (default main; "
                        "all with --engine, whose users are checked against the plan's, which counts every request)")
    g.add_argument("--align", choices=("t0", "stagger", "trace"), default=None,
                   help="when each session starts (default: t0 for session traces, trace for one-clock traces)")
    g.add_argument("--warmup", type=fraction(0.0, 1.0, hi_open=True), default=0.5, metavar="F",
                   help="fraction of requests that fill the cache uncounted (default 0.5: the second half is measured)")
    g.add_argument("--users", type=whole(1, MAX_REPLAY_USERS), default=None, metavar="N",
                   help="replay N concurrent users, each running sessions drawn from the trace back to back")
    g.add_argument("--sessions-per-user", type=whole(1, 10_000), default=None, metavar="K",
                   help="sessions each user runs (default max(4, ceil(100 / N)))")
    g.add_argument("--curves-for-users", type=counts(16, 1, MAX_REPLAY_USERS), default=(), metavar="N,N,...",
                   help="also draw the one-pass curve for these user counts (e.g. 5,10,20,40)")
    g.add_argument("--target-hit-rate", type=fraction(0.0, 1.0, lo_open=True), default=None, metavar="H",
                   help="the token hit rate users must keep, in (0, 1] (default 0.9; the cache replay's)")
    g.add_argument("--service", choices=("trace", "model", "none"), default=None,
                   help="service times of the exact replay (default: model with MODEL, else the trace's, else none)")
    g.add_argument("--no-output-blocks", dest="output_blocks", action="store_false",
                   help="a request's output takes no blocks (the reference tools' assumption)")
    g.add_argument("--no-exact", dest="exact", action="store_false", help="skip the exact replays")
    g.add_argument("--no-bounds", dest="bounds", action="store_false", help="skip FIFO and Belady")
    g.add_argument("--no-users-search", dest="users_search", action="store_false", help="skip users at the target")
    g.add_argument("--seed", type=whole(0, 2**63 - 1), default=0, help="seed of the session draws (default 0)")
    g.add_argument("--trace-format", choices=("claude-code", "mooncake", "openai", "measure"), default=None,
                   help="the trace's format, when detection should not decide")
    g.add_argument("--trace-block-size", type=whole(1, MAX_TRACE_BLOCK_SIZE), default=None, metavar="TOKENS",
                   help="tokens per hash id for hash traces whose records do not say (Mooncake: 512)")
    g.add_argument("--sessions", type=whole(1, MAX_SYNTHETIC_SESSIONS), default=None, metavar="N",
                   help="sessions to generate from a workload file (default: 1,600 requests' worth of its "
                        "session_turns-long sessions)")
    g.add_argument("--plot", metavar="PNG", default=None, help="write hit rate against pool size (and users) as a PNG")
    g.add_argument("--quiet", action="store_true", help="no progress on stderr")
    e = parser.add_argument_group("the engine simulator (--engine; needs MODEL --gpus)")
    e.add_argument("--engine", action="store_true",
                   help="run vLLM's V1 scheduler step by step instead of the cache replay: continuous batching, chunked "
                        "prefill within --max-num-batched-tokens, --max-num-seqs, the exact prefix cache, preemption, "
                        "the planner's step rooflines; TTFT and decode p50/p95 at --users N, and the users at which the "
                        "comfort SLO (--ttft-limit at p95, --decode-floor for 95%% of requests, warm) breaks, beside plan")
    e.add_argument("--engine-max-users", type=whole(1, MAX_ENGINE_USERS), default=None, metavar="N",
                   help="the most users the engine's search tries (default 4,096)")


class _Progress:
    """One line on stderr, rewritten in place on a terminal; elsewhere at most one line every 5 s."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self.last = 0.0

    def __call__(self, message: str) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        if self.tty:
            sys.stderr.write("\r\x1b[2K" + message[:150])
            sys.stderr.flush()
        elif now - self.last >= 5.0 or not message.startswith("exact replay "):
            sys.stderr.write(message + "\n")
            self.last = now

    def done(self) -> None:
        if self.tty and not self.quiet:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()


def run(args):
    from servesize.api import simulate
    from servesize.render.plots import plot_simulation

    scenario = None
    if args.model is not None:
        if args.gpus is None:
            raise BadInput("MODEL needs --gpus (the pool is the one vLLM builds on them); or give --pool-tokens alone")
        scenario = scenario_from_args(args)
    elif args.gpus is not None:
        raise BadInput("--gpus needs MODEL (simulate TRACE MODEL --gpus ...)")
    progress = _Progress(args.quiet)
    if args.engine:
        return _engine(args, scenario, progress)
    try:
        result = simulate(args.trace, scenario, pool_tokens=args.pool_tokens, block_size=args.block_size,
                          requests=args.requests or "main", align=args.align, warmup=args.warmup, users=args.users,
                          sessions_per_user=args.sessions_per_user, target_hit_rate=args.target_hit_rate,
                          service=args.service, output_blocks=args.output_blocks, exact=args.exact, bounds=args.bounds,
                          users_search=args.users_search, curves_for_users=args.curves_for_users,
                          max_model_len=args.max_model_len if scenario is None else None, seed=args.seed,
                          trace_format=args.trace_format, trace_block_size=args.trace_block_size,
                          synthetic_sessions=args.sessions, progress=progress)
    finally:
        progress.done()
    if args.plot:
        result.plot = plot_simulation(result, args.plot)
    return result


def _engine(args, scenario, progress):
    from servesize.api import simulate_engine

    if scenario is None:
        raise BadInput("--engine prices every step on a deployment: give MODEL and --gpus")
    if args.pool_tokens is not None or args.plot:
        raise BadInput("--engine takes the pool from MODEL and its flags: drop --pool-tokens and --plot")
    replay_only = [flag for name, (flag, unset) in REPLAY_ONLY.items() if getattr(args, name) != unset]
    if replay_only:
        raise BadInput(f"{', '.join(replay_only)} {'is a flag' if len(replay_only) == 1 else 'are flags'} of the cache "
                       "replay; the engine simulator takes none of them: drop --engine, or drop them")
    if args.users is not None and args.users > MAX_ENGINE_USERS:
        raise BadInput(f"--users {args.users:,} is past the engine simulator's {MAX_ENGINE_USERS:,} (every user is "
                       "priced step by step; the cache replay without --engine takes up to "
                       f"{MAX_REPLAY_USERS:,})")
    try:
        return simulate_engine(args.trace, scenario, users=args.users, search=args.users_search or args.users is None,
                               requests=args.requests or "all", align=args.align if args.align != "trace" else None,
                               sessions_per_user=args.sessions_per_user, warmup=args.warmup,
                               max_users=args.engine_max_users, seed=args.seed, trace_format=args.trace_format,
                               trace_block_size=args.trace_block_size, synthetic_sessions=args.sessions,
                               progress=progress)
    finally:
        progress.done()
