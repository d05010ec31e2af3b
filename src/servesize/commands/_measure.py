"""What the measure commands share: their flags (declared once, bounded), opening (or resuming) the run
record, running the measurement, and keeping every result taken whatever happens — an error, Ctrl-C or
SIGTERM ends the run, never the record."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from servesize.errors import BadInput, Interrupted, OutOfRange, ServesizeError, Terminated
from servesize.frozen import frozen
from servesize.scenario import MAX_TOKENS, Param

_SHOWN = ("url", "model", "prompt_tokens", "rounds", "predicted_tokens", "users", "duration_s", "block_size")

# -- the measure commands' own flags: each declared once, with its bounds ----------------------------

MAX_SECONDS = 86_400.0  # a day: longer than any request, stall or rung servesize should wait for
MAX_USERS_PREDICTED = 50_000  # the ladder goes to 2x the prediction, at most servesize.measure.sessions.MAX_USERS
MAX_WORKERS = 1024  # --workers: one process (a Ray actor) each


def _param(kind: str, help: str, *, lo: float | None = None, hi: float | None = None, lo_open: bool = False,
           metavar: str | None = None) -> Param:
    return Param(kind, help, "measure", lo=lo, hi=hi, lo_open=lo_open, metavar=metavar)


FLAGS: dict[str, Param] = {
    "prompt_tokens": _param("tokens", "tokens per prompt", lo=2, hi=MAX_TOKENS, metavar="S"),
    "rounds": _param("int", "rounds per probe (1 fills the cache, the later ones test warmth)", lo=2, hi=100, metavar="R"),
    "predicted_tokens": _param("tokens", "predicted pool in tokens: where the search starts", lo=1, hi=10**13, metavar="N"),
    "max_parallel": _param("int", "largest n probed", lo=1, hi=100_000, metavar="N"),
    "block_size": _param("int", "the engine's block size, when /metrics does not publish it", lo=1, hi=1 << 16,
                         metavar="TOKENS"),
    "warm_share": _param("float", "share of later-round requests that must be warm", lo=0.0, hi=1.0, lo_open=True,
                         metavar="F"),
    "timeout": _param("float", "per-request total timeout in seconds", lo=0.0, hi=MAX_SECONDS, lo_open=True, metavar="S"),
    "stall_timeout": _param("float", "longest silence between chunks once streaming, in seconds", lo=0.0, hi=MAX_SECONDS,
                            lo_open=True, metavar="S"),
    "seed": _param("int", "seed of the filler and the simulated users", lo=0, hi=2**32 - 1, metavar="N"),
    "turns_per_session": _param("int", "turns before a simulated session ends", lo=1, hi=10_000, metavar="N"),
    "max_model_len": _param("tokens", "the server's cap (default: /v1/models max_model_len)", lo=1, hi=MAX_TOKENS,
                            metavar="TOKENS"),
    "predicted_users": _param("float", "predicted warm users: the ladder goes x0.5 .. x2 around it", lo=0.0,
                              hi=MAX_USERS_PREDICTED, lo_open=True, metavar="N"),
    "predicted_decode": _param("float", "predicted decode tok/s per user at the knee (verdict only)", lo=0.0, hi=1e6,
                               lo_open=True, metavar="TOK_S"),
    "duration": _param("float", "seconds per rung", lo=0.0, hi=MAX_SECONDS, lo_open=True, metavar="S"),
    "requests_per_user": _param("int", "end a rung once every user has sent this many requests (the same requests "
                                "however fast the server runs)", lo=1, hi=1_000_000, metavar="N"),
    "warm_target": _param("float", "warm-hit rate that counts as comfortable", lo=0.0, hi=1.0, lo_open=True, metavar="F"),
    "max_error_rate": _param("float", "a rung with more failed requests than this share is failed: not a measurement, "
                             "measured again on --resume; it ends the ladder", lo=0.0, hi=1.0, metavar="F"),
    "workers": _param("int", "spread each rung's users over N worker processes with Ray (user u on worker u mod N; "
                      "default: every user in this process)", lo=1, hi=MAX_WORKERS, metavar="N"),
    "max_ttft_p95": _param("float", "stop the ladder when warm-hit TTFT p95 exceeds S seconds", lo=0.0, hi=MAX_SECONDS,
                           lo_open=True, metavar="S"),
}
for _name, _p in list(FLAGS.items()):
    FLAGS[_name] = Param(_p.kind, _p.help, _p.group, name=_name, lo=_p.lo, hi=_p.hi, lo_open=_p.lo_open,
                         metavar=_p.metavar)


def bounded(p: Param) -> Callable[[str], Any]:
    """The flag's parser: its value typed and bounds checked; a refusal names the flag, the value and the range."""
    def parse(text: str) -> Any:
        try:
            return p.parse(text)
        except OutOfRange:
            raise  # it names the range already
        except BadInput as exc:
            raise BadInput(f"{exc} (allowed: {p.range_text()})") from None
    parse.__name__ = p.name  # argparse names the type in its own messages
    return parse


def add_flag(parser: Any, name: str, default: Any = None, help: str | None = None) -> None:
    """The declared flag ``name`` on ``parser`` (a parser or an argument group)."""
    p = FLAGS[name]
    text = help or p.help
    if default is not None:
        text += f" (default {default:g})" if isinstance(default, float) else f" (default {default})"
    text += f"; {p.range_text()}"
    parser.add_argument(p.flag, dest=name, type=bounded(p), default=default, metavar=p.metavar, help=text.replace("%", "%%"))


def add_common(parser: argparse.ArgumentParser, kind: str, resume_help: str) -> None:
    """The flags every measure command takes: timeouts, seed, the run record and its output."""
    add_flag(parser, "timeout", 600.0)
    add_flag(parser, "stall_timeout", 60.0)
    add_flag(parser, "seed", 0)
    parser.add_argument("--record", metavar="FILE", help=f"the JSONL run record (default: servesize-{kind}-<time>.jsonl here)")
    parser.add_argument("--resume", metavar="FILE", help=resume_help)
    parser.add_argument("--fsync", action="store_true", help="fsync the record after every line")


# -- the run record ---------------------------------------------------------------------------------

@frozen
class Recording:
    """Where a measurement's run record goes: a new file, or one to continue (--resume).

    ``same_params``: continuing is only allowed when the new flags describe the same run (``measure
    server --record-dir`` continues whatever the folder holds, so it must not continue another run)."""

    url: str | None
    record: str | None = None
    resume: str | None = None
    fsync: bool = False
    quiet: bool = False
    same_params: bool = False

    @classmethod
    def of(cls, args) -> Recording:
        return cls(args.url, args.record, args.resume, args.fsync, args.quiet)


def open_record(rec: Recording, kind: str, config_cls: Any, make_config: Callable[[], Any]):
    """(config, record, resumed contents): from --resume FILE, or a new record from the flags. The record is
    locked before it is read: a second run on it is refused (one line, the holder's pid) before it says or
    sends anything."""
    from servesize.measure.record import RecordLock, RunRecord

    if rec.resume:
        lock = RecordLock.acquire(rec.resume, create=False)
        try:
            return _resumed(rec, rec.resume, kind, config_cls, make_config, lock)
        except BaseException:
            lock.release()
            raise
    check_url(rec.url, kind)
    cfg = make_config()
    path = rec.record or time.strftime(f"servesize-{kind}-%Y%m%d-%H%M%S.jsonl")
    return cfg, RunRecord.create(path, kind, cfg.to_params(), fsync=rec.fsync), None


def _resumed(rec: Recording, path: str, kind: str, config_cls: Any, make_config: Callable[[], Any], lock: Any):
    """open_record's --resume branch, the record already locked (``lock`` passes to the RunRecord)."""
    from servesize.measure.record import RunRecord, check_version, read_record

    read = check_version(read_record(path, kind), path)  # once: RunRecord.resume takes it, under the same lock
    recorded = read.header["params"]
    if rec.same_params:
        refuse_other_params(path, recorded, make_config().to_params(), config_defaults(config_cls))
    cfg = config_cls.from_params(recorded)
    if rec.url:
        cfg.url = rec.url
    what = "the same parameters" if rec.same_params else "its recorded parameters"
    print(f"servesize: resuming {path} with {what} ("
          + ", ".join(f"{k} {v}" for k, v in cfg.to_params().items() if k in _SHOWN and v is not None)
          + (")" if rec.same_params else "); other measurement flags are not applied"), file=sys.stderr)
    record, contents = RunRecord.resume(path, kind, fsync=rec.fsync, lock=lock, contents=read)
    if contents.repair:
        print(f"servesize: {contents.repair}", file=sys.stderr)
    return cfg, record, contents


def config_defaults(config_cls: Any) -> dict:
    """A measurement config's field defaults: what a record taken before a field existed was taken with."""
    return {f.name: f.default for f in dataclasses.fields(config_cls) if f.default is not dataclasses.MISSING}


def refuse_other_params(path: str, recorded: dict, new: dict, defaults: dict | None = None) -> None:
    """BadInput naming what differs when the record at ``path`` was taken with other parameters (the URL
    may change: a restarted server on another port is the same run). A parameter the record does not hold
    (added to servesize after it was taken) differs only when the new value is not its default (``defaults``)."""
    fresh = json.loads(json.dumps(new, default=str))
    differ = []
    for key in sorted(set(recorded) | set(fresh)):
        if key == "url" or recorded.get(key) == fresh.get(key):
            continue
        if key not in recorded and defaults is not None and key in defaults and fresh.get(key) == defaults[key]:
            continue
        differ.append(f"{key} {_brief(recorded.get(key))} -> {_brief(fresh.get(key))}")
    if differ:
        raise BadInput(f"{path} holds a run taken with other parameters ({'; '.join(differ[:4])}"
                       f"{'; ...' if len(differ) > 4 else ''}): continuing it would mix two runs. Give the flags it was "
                       f"taken with, or another --record-dir")


def _brief(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 60 else text[:60] + "..."


def check_url(text: str | None, kind: str) -> str:
    """``text`` when it is an http(s) URL (for ``measure sessions``: one, or a comma list of endpoints)."""
    if not text:
        raise BadInput(f"measure {kind} needs --url (or --resume FILE)")
    if kind == "sessions" and "," in text:
        for part in text.split(","):
            _check_one_url(part.strip(), text)
        return text
    return _check_one_url(text, text)


def _check_one_url(text: str, given: str) -> str:
    from urllib.parse import urlparse

    try:
        url = urlparse(text)
        ok = url.scheme in ("http", "https") and bool(url.hostname)
        _ = url.port  # a port that is not a number, or out of range, raises
    except ValueError:
        ok = False
    if not ok:
        what = f"--url {text!r}" if text == given else f"--url {given!r}: {text!r}"
        raise BadInput(f"{what} is not an http(s) URL such as http://localhost:8000")
    return text


# -- running it ---------------------------------------------------------------------------------------

def run_recorded(rec: Recording, record: Any, measurement: Callable[[Any], Any]) -> Any:
    """Run ``measurement(progress)`` (a coroutine) on the measurement loop, appending its end (or its
    error, or the signal that ended it) to the record, which is always closed. SIGTERM ends the run as
    Ctrl-C does: the results taken stay in the record, an ``interrupted`` event names the signal, and the
    exit is 143 (Ctrl-C: 130)."""
    from servesize.measure.client import run_async
    from servesize.measure.report import StderrProgress

    progress = StderrProgress(enabled=not rec.quiet)
    again = f"continue with --resume {record.path}" if getattr(record, "resumable", True) else "run it again"
    where = f"the record {record.path} keeps every result taken; {again}" if record.path else "nothing was recorded"
    try:
        result = run_async(_terminable(measurement(progress)))
        record.append("end", result=result.to_dict())
    except ServesizeError as exc:
        record.append("error", message=str(exc))
        raise
    except _SigTerm:
        progress.end()
        record.append("interrupted", signal="SIGTERM")
        raise Terminated(f"terminated (SIGTERM); {where}") from None
    except KeyboardInterrupt:
        progress.end()
        record.append("interrupted", signal="SIGINT")
        raise Interrupted(f"interrupted; {where}") from None
    finally:
        progress.end()
        record.close()
    return result


class _SigTerm(Exception):
    """SIGTERM arrived during the measurement (raised once its task has been cancelled and has unwound)."""


async def _terminable(coro):
    """Await ``coro`` with SIGTERM cancelling it (so every ``async with`` unwinds and closes), then _SigTerm."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(coro)
    got: list[int] = []

    def on_term() -> None:
        got.append(signal.SIGTERM)
        task.cancel()

    try:
        loop.add_signal_handler(signal.SIGTERM, on_term)
        installed = True
    except (ValueError, RuntimeError, NotImplementedError):  # not the main thread, or no signals here
        installed = False
    try:
        return await task
    except asyncio.CancelledError:
        if got:
            raise _SigTerm() from None
        raise
    finally:
        if installed:
            loop.remove_signal_handler(signal.SIGTERM)
