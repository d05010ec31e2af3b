"""servesize measure server: the pool, then the warm-capacity ladder, each beside servesize's prediction."""

from __future__ import annotations

import argparse
import pathlib
import time
from dataclasses import dataclass
from typing import Any

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

def add_arguments(p: argparse.ArgumentParser) -> None:
    measure_sessions.add_arguments(p)
    g = p.add_argument_group("pool measurement")
    g.add_argument("--prompt-tokens", type=parse_tokens, default=4097, metavar="S", help="tokens per pool prompt (default 4097)")
    g.add_argument("--rounds", type=int, default=3, metavar="R", help="rounds per pool probe (default 3)")
    p.add_argument("--record-dir", metavar="DIR", help="where both run records go (default: servesize-server-<time>/)")


@dataclass
class ServerReport:
    pool: Any
    sessions: Any
    exit_code: int = 0

    def to_dict(self) -> dict:
        return {"pool": self.pool.to_dict(), "sessions": self.sessions.to_dict()}

    def render(self, explain: bool = False) -> str:
        from servesize.measure.report import render_pool, render_sessions

        return "\n".join([render_pool(self.pool, explain), "", render_sessions(self.sessions, explain)])


def run(args):
    from servesize.commands import measure_pool
    from servesize.commands._measure import Recording, check_url

    check_url(args.url, "server")
    if not args.predict:
        raise BadInput('measure server needs --predict "MODEL --gpus ... [vLLM flags]" (the served model and its flags)')
    folder = pathlib.Path(args.record_dir or time.strftime("servesize-server-%Y%m%d-%H%M%S"))
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"--record-dir {folder}: cannot create it ({exc.strerror or exc})") from None
    pool_record, sessions_record = folder / "pool.jsonl", folder / "sessions.jsonl"

    def recording(path: pathlib.Path) -> Recording:  # a record already there continues (the run was interrupted)
        return Recording(args.url, resume=str(path) if path.exists() else None,
                         record=None if path.exists() else str(path), fsync=args.fsync, quiet=args.quiet)

    pool_args = argparse.Namespace(**{**_pool_defaults(), "url": args.url, "model": args.model,
                                      "prompt_tokens": args.prompt_tokens, "rounds": args.rounds})
    pool = measure_pool.measure(pool_args, recording(pool_record), measure_pool.predicted_pool(args.predict))
    sessions = measure_sessions.measure(args, recording(sessions_record))
    return ServerReport(pool, sessions, max(getattr(pool, "exit_code", 0), getattr(sessions, "exit_code", 0)))


def _pool_defaults() -> dict:
    """``measure pool``'s own defaults for the flags this command does not take."""
    from servesize.commands import measure_pool

    parser = argparse.ArgumentParser(add_help=False)
    measure_pool.add_arguments(parser)
    return vars(parser.parse_args([]))
