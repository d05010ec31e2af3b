"""What the measure commands share: open (or resume) the run record, run the measurement, and keep
every result taken whatever happens — an error or Ctrl-C ends the run, never the record."""

from __future__ import annotations

import sys
import time
from typing import Callable

from servesize.errors import BadInput, ServesizeError


def open_record(args, kind: str, config_cls, make_config: Callable[[], object]):
    """(config, record, resumed contents): from --resume FILE, or a new record from the flags."""
    from servesize.measure.record import RunRecord, read_record

    if args.resume:
        cfg = config_cls.from_params(read_record(args.resume, kind).header["params"])
        if args.url:
            cfg.url = args.url
        record, contents = RunRecord.resume(args.resume, kind, fsync=args.fsync)
        return cfg, record, contents
    if not args.url:
        raise BadInput(f"measure {kind} needs --url (or --resume FILE)")
    cfg = make_config()
    path = args.record or time.strftime(f"servesize-{kind}-%Y%m%d-%H%M%S.jsonl")
    return cfg, RunRecord.create(path, kind, cfg.to_params(), fsync=args.fsync), None


def run_recorded(args, record, measurement: Callable[[object], object]):
    """Run ``measurement(progress)`` (a coroutine) on the measurement loop, appending its end (or its
    error) to the record, which is always closed."""
    from servesize.measure.client import run_async
    from servesize.measure.report import StderrProgress

    progress = StderrProgress(enabled=not args.quiet)
    try:
        result = run_async(measurement(progress))
        record.append("end", result=result.to_dict())
    except ServesizeError as exc:
        record.append("error", message=str(exc))
        raise
    except KeyboardInterrupt:
        progress.end()
        print(f"servesize: interrupted; the record {record.path} keeps every result taken; "
              f"continue with --resume {record.path}", file=sys.stderr)
        raise
    finally:
        progress.end()
        record.close()
    return result
