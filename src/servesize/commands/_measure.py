"""What the measure commands share: open (or resume) the run record, run the measurement, and keep
every result taken whatever happens — an error or Ctrl-C ends the run, never the record."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from servesize.errors import BadInput, Interrupted, ServesizeError

_SHOWN = ("url", "model", "prompt_tokens", "rounds", "predicted_tokens", "users", "duration_s", "block_size")


@dataclass(frozen=True)
class Recording:
    """Where a measurement's run record goes: a new file, or one to continue (--resume)."""

    url: str | None
    record: str | None = None
    resume: str | None = None
    fsync: bool = False
    quiet: bool = False

    @classmethod
    def of(cls, args) -> Recording:
        return cls(args.url, args.record, args.resume, args.fsync, args.quiet)


def open_record(rec: Recording, kind: str, config_cls: Any, make_config: Callable[[], Any]):
    """(config, record, resumed contents): from --resume FILE, or a new record from the flags."""
    from servesize.measure.record import RunRecord, read_record

    if rec.resume:
        cfg = config_cls.from_params(read_record(rec.resume, kind).header["params"])
        if rec.url:
            cfg.url = rec.url
        print(f"servesize: resuming {rec.resume} with its recorded parameters ("
              + ", ".join(f"{k} {v}" for k, v in cfg.to_params().items() if k in _SHOWN and v is not None)
              + "); other measurement flags are not applied", file=sys.stderr)
        record, contents = RunRecord.resume(rec.resume, kind, fsync=rec.fsync)
        return cfg, record, contents
    check_url(rec.url, kind)
    cfg = make_config()
    path = rec.record or time.strftime(f"servesize-{kind}-%Y%m%d-%H%M%S.jsonl")
    return cfg, RunRecord.create(path, kind, cfg.to_params(), fsync=rec.fsync), None


def check_url(text: str | None, kind: str) -> str:
    from urllib.parse import urlparse

    if not text:
        raise BadInput(f"measure {kind} needs --url (or --resume FILE)")
    url = urlparse(text)
    if url.scheme not in ("http", "https") or not url.netloc:
        raise BadInput(f"--url {text!r} is not an http(s) URL such as http://localhost:8000")
    return text


def run_recorded(rec: Recording, record: Any, measurement: Callable[[Any], Any]) -> Any:
    """Run ``measurement(progress)`` (a coroutine) on the measurement loop, appending its end (or its
    error) to the record, which is always closed."""
    from servesize.measure.client import run_async
    from servesize.measure.report import StderrProgress

    progress = StderrProgress(enabled=not rec.quiet)
    try:
        result = run_async(measurement(progress))
        record.append("end", result=result.to_dict())
    except ServesizeError as exc:
        record.append("error", message=str(exc))
        raise
    except KeyboardInterrupt:
        progress.end()
        record.append("interrupted")
        raise Interrupted(f"interrupted; the record {record.path} keeps every result taken; "
                          f"continue with --resume {record.path}") from None
    finally:
        progress.end()
        record.close()
    return result
