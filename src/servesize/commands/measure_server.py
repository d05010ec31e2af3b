"""servesize measure server: the pool, then the warm-capacity ladder, each beside servesize's prediction."""

from __future__ import annotations

import argparse
import pathlib
import time
from dataclasses import dataclass, field
from typing import Any

from servesize.commands import measure_sessions
from servesize.errors import BadInput
from servesize.jsonable import Record, json_as

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

def add_arguments(p: argparse.ArgumentParser) -> None:
    from servesize.commands._measure import add_flag

    measure_sessions.add_arguments(p)
    g = p.add_argument_group("pool measurement")
    add_flag(g, "prompt_tokens", 4097, help="tokens per pool prompt")
    add_flag(g, "rounds", 3, help="rounds per pool probe")
    p.add_argument("--record-dir", metavar="DIR",
                   help="where both run records go (default: servesize-server-<time>/); a folder holding an "
                        "unfinished run continues it, and is refused when the flags describe another run")


@dataclass
class ServerReport(Record):
    pool: Any
    sessions: Any
    exit_code: int = field(default=0, metadata=json_as(None))

    @property
    def failure(self) -> str | None:
        reasons = [r for r in (getattr(self.pool, "failure", None), getattr(self.sessions, "failure", None)) if r]
        return "; ".join(reasons) or None

    JSON_EXTRA = ("failure",)

    def render(self, explain: bool = False) -> str:
        from servesize.measure.report import render_pool, render_sessions

        return "\n".join([render_pool(self.pool, explain), "", render_sessions(self.sessions, explain)])


def run(args):
    from servesize.commands import measure_pool
    from servesize.commands._measure import Recording, check_url, config_defaults, refuse_other_params
    from servesize.measure.pool import PoolConfig, predicted_tokens_of
    from servesize.measure.record import read_record
    from servesize.measure.sessions import SessionsConfig

    check_url(args.url, "server")
    if not args.predict:
        raise BadInput('measure server needs --predict "MODEL --gpus ... [vLLM flags]" (the served model and its flags)')
    folder = pathlib.Path(args.record_dir or time.strftime("servesize-server-%Y%m%d-%H%M%S"))
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"--record-dir {folder}: cannot create it ({exc.strerror or exc})") from None
    pool_record, sessions_record = folder / "pool.jsonl", folder / "sessions.jsonl"

    def recording(path: pathlib.Path) -> Recording:
        # a record already there continues (the run was interrupted or failed), but only with the flags it was
        # taken with: new flags (another --predict, workload or ladder) would be silently ignored otherwise
        return Recording(args.url, resume=str(path) if path.exists() else None,
                         record=None if path.exists() else str(path), fsync=args.fsync, quiet=args.quiet,
                         same_params=True)

    pool_args = argparse.Namespace(**{**_pool_defaults(), "url": args.url, "model": args.model, "predict": args.predict,
                                      "prompt_tokens": args.prompt_tokens, "rounds": args.rounds, "seed": args.seed,
                                      "timeout": args.timeout, "stall_timeout": args.stall_timeout})
    predicted = measure_pool.predicted_pool(args.predict)
    # both records are checked before anything is measured: a folder of another run is refused whole
    if pool_record.exists():
        tokens = predicted_tokens_of(predicted)
        refuse_other_params(str(pool_record), read_record(pool_record, "pool").header["params"],
                            measure_pool.pool_config(pool_args, tokens).to_params(), config_defaults(PoolConfig))
    if sessions_record.exists():
        refuse_other_params(str(sessions_record), read_record(sessions_record, "sessions").header["params"],
                            measure_sessions.config_maker(args)().to_params(), config_defaults(SessionsConfig))
    pool = measure_pool.measure(pool_args, recording(pool_record), predicted)
    sessions = measure_sessions.measure(args, recording(sessions_record))
    return ServerReport(pool, sessions, max(getattr(pool, "exit_code", 0), getattr(sessions, "exit_code", 0)))


def _pool_defaults() -> dict:
    """``measure pool``'s own defaults for the flags this command does not take."""
    from servesize.commands import measure_pool

    parser = argparse.ArgumentParser(add_help=False)
    measure_pool.add_arguments(parser)
    return vars(parser.parse_args([]))
