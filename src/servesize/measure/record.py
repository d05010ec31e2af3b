"""The run record: one JSON object per line, appended and flushed as each outcome arrives.

Line 1 is the header (``{"type": "header", "kind": "pool" | "sessions", "params": {...}, ...}``);
every later line is an event with a ``type`` (``request``, ``round``, ``probe``, ``rung``,
``rung_failed``, ``note``, ``segment``, ``end``, ``interrupted``, ...). Nothing is rewritten in place,
so a crash, Ctrl-C or SIGTERM loses at most the line being written.

``--resume FILE`` reads the file back, replays what is complete and appends the rest to the same file
(a ``segment`` line marks each continuation). Before it appends, it repairs the end of the file, so
that two events are never glued onto one line:

- a last line cut short (a crash mid-write: not JSON, no newline) is truncated away, back to the end of
  the last complete record; the segment line says how many bytes were dropped and keeps an excerpt;
- a last line that is a complete record without its newline is kept and ended with one.

A record is locked while a run writes it: ``RecordLock`` holds an exclusive, non-blocking ``flock`` on
the record's own file from before it is read (or created) until the run closes it, so a second run on
the same record (two ``--resume`` at once, or a new run with the same ``--record``) is refused in one line
naming the record and the process that holds it, instead of both appending rungs measured while they
loaded the server together. The lock dies with its process: a crashed run leaves none behind.

Reading is bounded: a record over ``MAX_RECORD_BYTES`` or a line over ``MAX_LINE_BYTES`` is refused,
and so is a line nested deeper than the decoder allows, one holding NaN or Infinity, or an event that
is not a JSON object with a ``type``. Every refusal is one line naming the file and the line.
"""

from __future__ import annotations

import errno
import fcntl
import io
import json
import math
import os
import pathlib
import stat
import time
import types
import typing
from dataclasses import MISSING, dataclass, field
from typing import Any, Union, get_args, get_origin

from servesize.errors import BadInput, clip
from servesize.jsonable import finite

FORMAT_VERSION = 1
MAX_RECORD_BYTES = 1 << 30  # 1 GiB: about a million recorded requests; a longer campaign is several runs
MAX_LINE_BYTES = 16 << 20  # 16 MiB: a request line is ~1 KB, a run's 'end' line well under a megabyte
DROPPED_EXCERPT_CHARS = 1000  # how much of a truncated torn line the segment line keeps


@dataclass
class RecordContents:
    header: dict
    events: list[dict] = field(default_factory=list)
    torn_tail: bool = False  # the last line was cut short (a crash mid-write) and is not an event
    torn_bytes: bytes = b""  # that line, as it was
    unterminated: bool = False  # the last line is a complete event that lacks its newline
    complete_bytes: int = 0  # the file's length up to the end of its last complete line
    segments: int = 0  # continuations (--resume) the record already holds
    repair: str | None = None  # what --resume did to the file's end before appending, if anything

    def of_type(self, kind: str) -> list[dict]:
        return [e for e in self.events if e.get("type") == kind]


class RecordLock:
    """An exclusive ``flock`` on a run record's file, taken without waiting: ``acquire`` raises BadInput (one
    line, naming the record and the holding pid) when another run holds it. ``flock`` belongs to this open
    file, so reading or closing the record through other files of this process never drops it; it is
    released by ``release`` or when the process ends, however it ends."""

    def __init__(self, path: pathlib.Path, fd: int):
        self.path, self._fd = path, fd

    @classmethod
    def acquire(cls, path, *, create: bool) -> RecordLock:
        """Lock the record at ``path`` (``create``: making it, empty, when it is not there). Only a regular
        file is locked: a FIFO or a device is refused before anything waits on it (O_NONBLOCK)."""
        p = pathlib.Path(path)
        flags = os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | (os.O_CREAT if create else 0)
        try:
            fd = os.open(p, flags, 0o644)
        except FileNotFoundError:
            raise BadInput(f"no run record at {p} (nothing to resume)") from None
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # a FIFO nobody reads
                raise BadInput(f"the run record {p} is not a regular file") from None
            raise BadInput(f"cannot write the run record {p}: {exc.strerror}") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise BadInput(f"the run record {p} is not a regular file")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise BadInput(f"the run record {p} is in use by another run ({_holder(fd)}): two runs writing one record "
                               f"would record rungs twice, measured while they loaded the server together; wait for it "
                               f"to end, or stop it") from None
        except BaseException:
            os.close(fd)
            raise
        return cls(p, fd)

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the locking file releases the flock
            self._fd = -1


def _holder(fd: int) -> str:
    """'pid N' of the process holding a flock on ``fd``'s file, from /proc/locks (Linux); else in words."""
    st = os.fstat(fd)
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            table = fh.read(1 << 20)
    except OSError:
        return "another process"
    for line in table.splitlines():
        fields = line.split()
        # '1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF' (a line with '->' is a waiter, not a holder)
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[3] == "WRITE" and "->" not in fields:
            inode = fields[5].rsplit(":", 1)[-1]
            if inode == str(st.st_ino) and fields[4].isdigit():
                return f"pid {fields[4]}"
    return "another process"


class RunRecord:
    """Append-only JSONL writer. ``RunRecord(None)`` records nothing (and costs nothing). Made by ``create``
    or ``resume``, it holds the record's ``RecordLock`` until ``close``."""

    def __init__(self, path: str | os.PathLike | None, *, fsync: bool = False, lock: RecordLock | None = None):
        self.path = pathlib.Path(path) if path is not None else None
        self.fsync = fsync
        self.lines = 0
        self.segment = 0  # this writer's continuation number (0: the first run)
        self.resumable = True  # a run taken again with --resume (measure bench's is run again instead)
        self._fh = None
        self._lock = lock
        if self.path is not None:
            try:
                self._fh = open(self.path, "a", encoding="utf-8")
            except OSError as exc:
                self._release()
                raise BadInput(f"cannot write the run record {self.path}: {exc.strerror}") from None

    @classmethod
    def create(cls, path, kind: str, params: dict, *, fsync: bool = False, lock: RecordLock | None = None,
               resumable: bool = True) -> RunRecord:
        """A new record with its header; ``lock`` (else one taken here) is held until ``close``. ``resumable``: its
        run can be continued with --resume (what the refusals and the end of an interrupted run say)."""
        if path is not None and lock is None:
            lock = RecordLock.acquire(path, create=True)
        try:
            if path is not None and pathlib.Path(path).stat().st_size > 0:
                how = f"continue it with --resume {path} or choose" if resumable else "choose"
                raise BadInput(f"the run record {path} already exists; {how} another --record")
            rec = cls(path, fsync=fsync, lock=lock)
            rec.resumable = resumable
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        rec.append("header", kind=kind, version=FORMAT_VERSION, params=params, started=time.time())
        return rec

    @classmethod
    def resume(cls, path, kind: str, *, fsync: bool = False, lock: RecordLock | None = None,
               contents: RecordContents | None = None) -> tuple[RunRecord, RecordContents]:
        """Open a record to continue it: locked (``lock``, else one taken here), its end repaired (see the module
        docstring), a segment line appended. ``contents``: what a caller holding ``lock`` already read and checked
        (read_record, check_version), so the record is read once."""
        if contents is not None and lock is None:
            raise ValueError("contents read before the lock was taken may be stale: pass the lock they were read under")
        lock = lock or RecordLock.acquire(path, create=False)
        try:
            return cls._resume(path, kind, fsync, lock, contents)
        except BaseException:
            lock.release()
            raise

    @classmethod
    def _resume(cls, path, kind: str, fsync: bool, lock: RecordLock,
                contents: RecordContents | None) -> tuple[RunRecord, RecordContents]:
        if contents is None:
            contents = check_version(read_record(path, kind), path)
        dropped = None
        if contents.torn_tail:
            try:
                os.truncate(path, contents.complete_bytes)
            except OSError as exc:
                raise BadInput(f"cannot repair the run record {path}: {exc.strerror}") from None
            dropped = contents.torn_bytes.decode("utf-8", "replace")[:DROPPED_EXCERPT_CHARS]
            contents.repair = (f"the last line of {path} was cut short ({len(contents.torn_bytes):,} bytes, a write that "
                               f"a crash interrupted; not a complete record): truncated it, back to the last complete record")
        elif contents.unterminated:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write("\n")
            contents.repair = f"the last record of {path} lacked its newline: ended it, so the next event starts a line of its own"
        rec = cls(path, fsync=fsync, lock=lock)
        rec.segment = contents.segments + 1
        rec.append("segment", resumed=time.time(), events_before=len(contents.events), repaired=contents.repair,
                   dropped=dropped)
        return rec, contents

    def append(self, type_: str, **fields) -> None:
        if self._fh is None:
            return
        event = {"type": type_, **fields}
        try:
            line = json.dumps(event, default=_default, separators=(",", ":"), allow_nan=False)
        except ValueError:  # NaN or Infinity somewhere: JSON has neither, so they are written as null
            line = json.dumps(finite(event), default=_default, separators=(",", ":"), allow_nan=False)
        try:
            self._fh.write(line + "\n")
            self._fh.flush()
            if self.fsync:
                os.fsync(self._fh.fileno())
        except OSError as exc:  # a full disk: the lines before this one are on disk (each is flushed whole)
            raise BadInput(f"cannot write the run record {self.path} ({exc.strerror or exc}); the {self.lines:,} "
                           f"lines before are in it: free space and "
                           + (f"continue with --resume {self.path}" if self.resumable else "run it again")) from None
        self.lines += 1

    def close(self) -> None:
        if self._fh is not None:
            fh, self._fh = self._fh, None
            try:
                fh.close()
            except OSError:  # the line a full disk refused is still buffered: append said so already
                pass
        self._release()

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> RunRecord:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check_version(contents: RecordContents, path) -> RecordContents:
    """The contents, when their header's format version is the one this servesize writes; else BadInput (one line):
    a record of another (newer) format is never continued as if it were this one."""
    version = contents.header.get("version")
    if version != FORMAT_VERSION:
        raise BadInput(f"{path}: the record's header says format version {clip(version)}, and this servesize "
                       f"writes and resumes version {FORMAT_VERSION} only; it refuses to continue it (use the servesize "
                       "that wrote it)")
    return contents


def _default(obj):
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _decode(raw: bytes) -> dict | None:
    """One line as an event, or None when it is not a JSON object with a string ``type``."""
    try:
        event = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except (ValueError, RecursionError):  # not UTF-8, not JSON (a torn line), NaN, or nested past the decoder's limit
        return None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        return None
    return event


def _open_regular(p: pathlib.Path):
    try:
        st = p.stat()
    except FileNotFoundError:
        raise BadInput(f"no run record at {p} (nothing to resume)") from None
    except OSError as exc:
        raise BadInput(f"cannot read the run record {p}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise BadInput(f"the run record {p} is not a regular file")
    if st.st_size > MAX_RECORD_BYTES:
        raise BadInput(f"the run record {p} is {st.st_size:,} bytes, over the {MAX_RECORD_BYTES:,} servesize reads")
    try:
        return open(p, "rb")
    except OSError as exc:
        raise BadInput(f"cannot read the run record {p}: {exc.strerror}") from None


def _lines(p: pathlib.Path | str, fh):
    """(line number, bytes without the newline, ended by a newline, offset after it) for each line of ``fh``."""
    offset = 0
    for number, raw in enumerate(iter(lambda: fh.readline(MAX_LINE_BYTES + 1), b""), start=1):
        ended = raw.endswith(b"\n")
        if len(raw) > MAX_LINE_BYTES and not ended:
            raise BadInput(f"{p} line {number} is longer than {MAX_LINE_BYTES:,} bytes: not a servesize run record")
        offset += len(raw)
        yield number, raw.rstrip(b"\n"), ended, offset


def read_record(path, kind: str | None = None) -> RecordContents:
    """Read a record back; BadInput (one line) when it is missing, not a record, damaged or of another kind."""
    p = pathlib.Path(path)
    with _open_regular(p) as fh:
        return _read(p, fh, kind)


def parse_record(text: str, source: str = "<record>", kind: str | None = None) -> RecordContents:
    """A record's text (an upload, a file's content) -> its contents, read as ``read_record`` reads a file."""
    data = text.encode("utf-8")
    if len(data) > MAX_RECORD_BYTES:
        raise BadInput(f"the run record {source} is {len(data):,} bytes, over the {MAX_RECORD_BYTES:,} servesize reads")
    return _read(source, io.BytesIO(data), kind)


def _read(p: pathlib.Path | str, fh, kind: str | None) -> RecordContents:
    events: list[dict] = []
    contents = RecordContents(header={})
    pending: tuple[int, bytes] | None = None  # a line that is not an event, kept until what follows says what it is
    for number, raw, ended, offset in _lines(p, fh):
        if not raw.strip():
            if ended:
                contents.complete_bytes = offset
            continue
        event = _decode(raw)
        if pending is not None:
            # an earlier resume ended a torn line with a newline instead of truncating it: a segment line follows it
            if event is None or event["type"] != "segment":
                raise BadInput(f"{p} line {pending[0]} is not a record event: the run record is damaged")
            pending = None
        if event is None:
            if not ended:  # the last line, cut short by a crash mid-write
                contents.torn_tail, contents.torn_bytes = True, raw
                break
            pending = (number, raw)
            contents.complete_bytes = offset
            continue
        events.append(event)
        if ended:
            contents.complete_bytes = offset
        else:
            contents.unterminated = True
    if pending is not None:
        raise BadInput(f"{p} line {pending[0]} is not a record event: the run record is damaged")
    return _with_header(p, events, contents, kind)


def _with_header(p: pathlib.Path | str, events: list[dict], contents: RecordContents, kind: str | None) -> RecordContents:
    """The contents, once the first event is a header of the kind asked for, with its parameters."""
    if not events or events[0]["type"] != "header":
        raise BadInput(f"{p} is not a servesize run record (no header line)")
    header = events[0]
    if kind is not None and header.get("kind") != kind:
        raise BadInput(f"{p} records a 'measure {header.get('kind')}' run, not 'measure {kind}'")
    if not isinstance(header.get("params"), dict):
        raise BadInput(f"{p}: the header line holds no run parameters: the run record is damaged")
    contents.header, contents.events = header, events[1:]
    contents.segments = sum(1 for e in contents.events if e["type"] == "segment")
    return contents


# -- typed reading of recorded objects ------------------------------------------------------------

def typed(cls: type, data: Any, where: str) -> dict:
    """``data`` (a recorded dict) checked against the fields of the dataclass ``cls``: every required field
    present, every value of its declared type (a float finite, an int not a bool); unknown keys dropped.
    BadInput (one line, naming ``where`` and the field) otherwise."""
    if not isinstance(data, dict):
        raise BadInput(f"{where} is not a JSON object: the run record is damaged")
    hints = _hints(cls)
    out = {}
    for name, f in cls.__dataclass_fields__.items():  # type: ignore[attr-defined]
        if name not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                raise BadInput(f"{where} has no {name!r}: the run record is damaged")
            continue
        if not _accepts(hints[name], data[name]):
            raise BadInput(f"{where}: {name!r} is {_show(data[name])}, not {_type_name(hints[name])}: the run record is damaged")
        out[name] = data[name]
    return out


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _accepts(tp: Any, v: Any) -> bool:
    origin = get_origin(tp)
    if origin is Union or origin is types.UnionType:
        return any(_accepts(a, v) for a in get_args(tp))
    if (scalar := _accepts_scalar(tp, v)) is not None:
        return scalar
    if tp is dict or origin is dict:
        return isinstance(v, dict)
    if tp is list or origin is list or origin is tuple:
        args = [a for a in get_args(tp) if a is not Ellipsis]
        return isinstance(v, list) and (not args or all(_accepts(args[0], x) for x in v))
    if hasattr(tp, "__dataclass_fields__"):
        return isinstance(v, dict)  # checked field by field where it is built
    return True


def _accepts_scalar(tp: Any, v: Any) -> bool | None:
    """Whether ``v`` is a JSON scalar of type ``tp`` (a bool is no number; ints fit 64 bits; floats are finite);
    None when ``tp`` is no scalar type."""
    if tp is type(None):
        return v is None
    if tp is Any:
        return True
    if tp is bool:
        return isinstance(v, bool)
    if tp is int:
        return isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**63
    if tp is float:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if tp is str:
        return isinstance(v, str)
    return None


def _type_name(tp: Any) -> str:
    return str(tp).replace("typing.", "").replace("<class '", "").replace("'>", "")


def _show(v: Any) -> str:
    text = json.dumps(v)
    return text if len(text) <= 40 else text[:40] + "..."
