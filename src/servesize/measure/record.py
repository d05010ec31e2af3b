"""The run record: one JSON object per line, appended and flushed as each outcome arrives.

Line 1 is the header (``{"type": "header", "kind": "pool" | "sessions", "params": {...}, ...}``);
every later line is an event with a ``type`` (``request``, ``round``, ``probe``, ``rung``, ``note``,
``segment``, ``end``, ...). Nothing is rewritten in place, so a crash or Ctrl-C loses at most the
line being written; ``read_record`` drops a torn last line. ``--resume FILE`` reads the file back,
replays what is complete and appends the rest to the same file (a ``segment`` line marks each
continuation).
"""

from __future__ import annotations

import json
import os
import pathlib
import time
from dataclasses import dataclass, field

from servesize.errors import BadInput

FORMAT_VERSION = 1


@dataclass
class RecordContents:
    header: dict
    events: list[dict] = field(default_factory=list)
    torn_tail: bool = False  # the last line was cut short (a crash mid-write) and was dropped

    def of_type(self, kind: str) -> list[dict]:
        return [e for e in self.events if e.get("type") == kind]


class RunRecord:
    """Append-only JSONL writer. ``RunRecord(None)`` records nothing (and costs nothing)."""

    def __init__(self, path: str | os.PathLike | None, *, fsync: bool = False):
        self.path = pathlib.Path(path) if path is not None else None
        self.fsync = fsync
        self.lines = 0
        self._fh = None
        if self.path is not None:
            try:
                self._fh = open(self.path, "a", encoding="utf-8")
            except OSError as exc:
                raise BadInput(f"cannot write the run record {self.path}: {exc.strerror}") from None

    @classmethod
    def create(cls, path, kind: str, params: dict, *, fsync: bool = False) -> RunRecord:
        if path is not None and pathlib.Path(path).exists() and pathlib.Path(path).stat().st_size > 0:
            raise BadInput(f"the run record {path} already exists; continue it with --resume {path} or choose another --record")
        rec = cls(path, fsync=fsync)
        rec.append("header", kind=kind, version=FORMAT_VERSION, params=params, started=time.time())
        return rec

    @classmethod
    def resume(cls, path, kind: str, *, fsync: bool = False) -> tuple[RunRecord, RecordContents]:
        contents = read_record(path, kind)
        if contents.torn_tail:  # end the torn line so the next event starts on a line of its own
            with open(path, "a", encoding="utf-8") as fh:
                fh.write("\n")
        rec = cls(path, fsync=fsync)
        rec.append("segment", resumed=time.time(), events_before=len(contents.events))
        return rec, contents

    def append(self, type_: str, **fields) -> None:
        if self._fh is None:
            return
        line = json.dumps({"type": type_, **fields}, default=_default, separators=(",", ":"))
        self._fh.write(line + "\n")
        self._fh.flush()
        if self.fsync:
            os.fsync(self._fh.fileno())
        self.lines += 1

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> RunRecord:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _default(obj):
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def read_record(path, kind: str | None = None) -> RecordContents:
    """Read a record back; BadInput (one line) when it is missing, not a record, or of another kind."""
    p = pathlib.Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"no run record at {p} (nothing to resume)") from None
    except OSError as exc:
        raise BadInput(f"cannot read the run record {p}: {exc.strerror}") from None
    return parse_record(text, str(p), kind)


def parse_record(text: str, source: str = "<record>", kind: str | None = None) -> RecordContents:
    """A record's text (an upload, a file's content) -> its header and events, as ``read_record``."""
    p = source
    lines = [line for line in text.split("\n") if line.strip()]
    events, torn = [], False
    for i, line in enumerate(lines):
        try:
            events.append(json.loads(line))
        except ValueError:
            # a line cut short by a crash: the last line, or one a resumed segment follows
            if i == len(lines) - 1:
                torn = True
                continue
            if _is_segment(lines[i + 1]):
                continue
            raise BadInput(f"{p} line {i + 1} is not JSON: the run record is damaged") from None
        if not isinstance(events[-1], dict):
            raise BadInput(f"{p} line {i + 1} is not a JSON object: this is not a servesize run record")
    if not events or events[0].get("type") != "header":
        raise BadInput(f"{p} is not a servesize run record (no header line)")
    header = events[0]
    if kind is not None and header.get("kind") != kind:
        raise BadInput(f"{p} records a 'measure {header.get('kind')}' run, not 'measure {kind}'")
    return RecordContents(header=header, events=events[1:], torn_tail=torn)


def _is_segment(line: str) -> bool:
    try:
        return json.loads(line).get("type") == "segment"
    except (ValueError, AttributeError):
        return False
