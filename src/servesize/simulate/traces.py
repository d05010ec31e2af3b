"""Request traces -> one Trace: every request with its prefix blocks, arrival and service time.

Formats, detected from the first record (gzip allowed, detected from the magic bytes):

- **Claude Code sessions** (WEKA's kv-cache-tester traces): one session per line, ``requests[]``
  with ``t`` (seconds since the session started), ``in``/``out`` tokens, ``api_time`` and
  ``hash_ids`` (one id per *full* block of ``block_size`` tokens); ``type: "subagent"`` entries nest
  a subagent's own ``requests`` (their ``t`` counts from the subagent's start, itself at the entry's
  ``t`` on the parent's clock). ``hash_id_scope: "local"`` ids mean something within their line only.
- **Mooncake / hash JSONL** (FAST'25 traces, kvcache-simulator's input): one request per line,
  ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids`` (one id per block, the last
  one partial), ``block_size`` when the record says (Mooncake's is 512). No sessions: each request
  stands alone on the trace's clock, and ids are global. A clock that rounded its arrivals to coarse ticks
  (the conversation trace's 3 s) has each tick's requests spread over it (``spread_ticks``).
- **OpenAI-style request logs** (``usage.prompt_tokens``, ``usage.prompt_tokens_details.cached_tokens``):
  no block ids, so they are made: within a session (``session_id``, ``user``, ``metadata.session_id``
  or ``conversation_id``) each prompt extends the previous one (append-only history, as agent
  harnesses send it), plus an optional shared prefix. The real server's ``cached_tokens`` are kept
  to compare with the simulated hits.
- **servesize measure sessions records** (the JSONL run record; its layout is documented in
  servesize/measure/record.py and read here without importing that layer): each request's prompt
  extends its session's previous prompt, after its class's shared prefix, and a salted turn starts
  a new chain; the engine's ``cached_tokens`` are kept beside.

Block ids are made **chained** (one id names a block and everything before it, as vLLM's chained
block hashes do) and dense: ids that already are (every id always follows the same id at the same
depth, which the readers check) are renumbered, others are re-hashed over their prefixes (a 64-bit
polynomial hash). A bad line or request is counted and reported with its line number, and a
truncated file is read up to where it breaks; neither raises.
"""

from __future__ import annotations

import gzip
import hashlib
import math
import pathlib
import re
import warnings
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import servesize.workload.formats as formats
from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.jsonable import Record
from servesize.limits import DEFAULT_SEED, MAX_REQUEST_TOKENS, MAX_TRACE_BLOCKS, parse_json, shown_number
from servesize.percentile import median
from servesize.workload.formats import MOONCAKE_BLOCK_TOKENS as MOONCAKE_BLOCK_SIZE
from servesize.workload.formats import SESSION_FIELDS, TIME_FIELDS, dotted, first_field, usage

MADE_BLOCK_SIZE = 16       # tokens per id the readers make for logs without ids: vLLM's default block size,
                           # so any engine block size that is a multiple of 16 re-chunks exactly
MAX_LINE_BYTES = 1 << 28   # one session line of 256 MiB is far past any real one (the largest here is ~3 MiB)
MAX_TOTAL_BLOCKS = (1 << 31) - 1  # ids are int32 in a replay
MAX_EXAMPLES = 5           # bad lines quoted in the report (the rest are counted)

FORMATS = formats.REPLAYABLE


class BadRecord(ValueError):
    """One line or request that cannot be read: counted, reported, skipped."""


# ----------------------------------------------------------------------------------------------
# what a reader hands on
# ----------------------------------------------------------------------------------------------

@dataclass
class ReadReport(Record):
    """What reading a trace found: counts, the first few bad lines, and where a truncated file broke."""

    path: str
    format: str = ""
    lines: int = 0
    requests: int = 0
    bad_lines: int = 0
    bad_requests: int = 0
    skipped: dict = field(default_factory=dict)   # reason -> count (requests read but not replayable)
    examples: list = field(default_factory=list)  # "line N: why"
    truncated: str | None = None
    notes: list = field(default_factory=list)

    def bad(self, where: str, why: str, *, line: bool = True) -> None:
        if line:
            self.bad_lines += 1
        else:
            self.bad_requests += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(f"{where}: {why}")

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def summary(self) -> str:
        parts = [f"{self.requests:,} requests from {self.lines:,} lines ({self.format})"]
        if self.bad_lines or self.bad_requests:
            parts.append(f"{self.bad_lines:,} bad lines and {self.bad_requests:,} bad requests skipped"
                         + (f" (first: {self.examples[0]})" if self.examples else ""))
        if self.skipped:
            parts.append("skipped: " + ", ".join(f"{n:,} {why}" for why, n in self.skipped.items()))
        if self.truncated:
            parts.append(f"truncated: {self.truncated}")
        return "; ".join(parts)


@frozen
class SessionInfo:
    """One session of a trace (a Claude Code conversation, a subagent, a measured user session)."""

    key: str
    parent: int = -1        # a subagent: the index of the session that spawned it
    start_s: float = 0.0    # a subagent: when it started on its parent's clock (seconds)
    prefix_tokens: int = 0  # system + tool tokens, when the trace says


@dataclass(frozen=True, eq=False)
class Trace:
    """Requests (in file order) with their chained prefix-block ids, ``block_size`` tokens per id.

    ``t_s`` is seconds since the request's session started (``clock == "session"``: the sessions
    have no common clock) or on the trace's one clock (``clock == "trace"``). ``service_s`` and
    ``observed_cached_tokens`` are NaN where the trace does not say; ``group`` is a measure record's
    rung (-1 otherwise). ``blocks[offsets[i]:offsets[i + 1]]`` are request i's ids: one per block of
    ``block_size`` tokens from the start of its prompt, the last one possibly partial."""

    name: str
    format: str
    block_size: int
    clock: str
    sessions: tuple[SessionInfo, ...]
    session: np.ndarray
    t_s: np.ndarray
    service_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    subagent: np.ndarray
    observed_cached_tokens: np.ndarray
    group: np.ndarray
    blocks: np.ndarray
    offsets: np.ndarray
    num_ids: int
    report: ReadReport

    @property
    def requests(self) -> int:
        return int(self.session.size)

    @property
    def has_sessions(self) -> bool:
        """Whether requests belong to sessions (a conversation's turns), not each to its own."""
        return self.clock == "session" or self.requests > len(self.sessions)

    def ids_of(self, i: int) -> np.ndarray:
        return self.blocks[self.offsets[i]:self.offsets[i + 1]]

    def to_dict(self) -> dict:
        return {"name": self.name, "format": self.format, "block_size": self.block_size, "clock": self.clock,
                "requests": self.requests, "sessions": len(self.sessions),
                "subagent_requests": int(np.count_nonzero(self.subagent)), "distinct_blocks": self.num_ids,
                "input_tokens": int(self.input_tokens.sum()), "read": self.report.to_dict()}


# ----------------------------------------------------------------------------------------------
# the builder every reader feeds
# ----------------------------------------------------------------------------------------------

class TraceBuilder:
    """Collects requests; ``build`` makes the ids chained and dense, one namespace at a time
    (ids of one namespace mean the same blocks; those of two namespaces never do)."""

    def __init__(self, fmt: str, block_size: int, clock: str, report: ReadReport):
        self.format, self.block_size, self.clock, self.report = fmt, block_size, clock, report
        self.sessions: list[SessionInfo] = []
        self._cols: dict[str, list] = {k: [] for k in ("session", "t", "service", "inp", "out", "sub", "cached", "group")}
        self._ids: list[np.ndarray] = []
        self._namespaces: list[int] = [0]  # first request index of each namespace
        self._blocks = 0

    def add_session(self, info: SessionInfo) -> int:
        self.sessions.append(info)
        return len(self.sessions) - 1

    def new_namespace(self) -> None:
        if self._namespaces[-1] != len(self._ids):
            self._namespaces.append(len(self._ids))

    def add_request(self, session: int, t_s: float, input_tokens: int, output_tokens: int, ids: np.ndarray, *,
                    service_s: float = math.nan, subagent: bool = False, cached: float = math.nan, group: int = -1) -> None:
        self._blocks += ids.size
        if self._blocks > min(MAX_TOTAL_BLOCKS, MAX_TRACE_BLOCKS):
            raise BadInput(f"{self.report.path}: more than {min(MAX_TOTAL_BLOCKS, MAX_TRACE_BLOCKS):,} prefix blocks "
                           "(MAX_TRACE_BLOCKS); replay a part of it")
        c = self._cols
        c["session"].append(session)
        c["t"].append(t_s)
        c["service"].append(service_s)
        c["inp"].append(input_tokens)
        c["out"].append(output_tokens)
        c["sub"].append(subagent)
        c["cached"].append(cached)
        c["group"].append(group)
        self._ids.append(ids)
        self.report.requests += 1

    def build(self, name: str) -> Trace:
        if not self._ids:
            raise BadInput(f"{self.report.path}: no replayable requests ({self.report.summary()})")
        lens = np.fromiter((a.size for a in self._ids), dtype=np.int64, count=len(self._ids))
        offsets = np.zeros(len(self._ids) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        raw = np.concatenate([np.asarray(a, dtype=np.int64) for a in self._ids]) if offsets[-1] else np.zeros(0, np.int64)
        self._ids = []
        bounds = [*self._namespaces, len(lens)]
        base = 0
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            a, z = int(offsets[lo]), int(offsets[hi])
            if z > a:
                span = chain_ids(raw[a:z], lens[lo:hi], raw[a:z])
                raw[a:z] += base
                base += span
        blocks = raw.astype(np.int32) if base < MAX_TOTAL_BLOCKS else raw
        c = self._cols
        return Trace(name=name, format=self.format, block_size=self.block_size, clock=self.clock,
                     sessions=tuple(self.sessions), session=np.asarray(c["session"], dtype=np.int32),
                     t_s=np.asarray(c["t"], dtype=np.float64), service_s=np.asarray(c["service"], dtype=np.float64),
                     input_tokens=np.asarray(c["inp"], dtype=np.int64), output_tokens=np.asarray(c["out"], dtype=np.int64),
                     subagent=np.asarray(c["sub"], dtype=bool), observed_cached_tokens=np.asarray(c["cached"], dtype=np.float64),
                     group=np.asarray(c["group"], dtype=np.int32), blocks=blocks, offsets=offsets, num_ids=int(base),
                     report=self.report)


# ----------------------------------------------------------------------------------------------
# chained, dense ids
# ----------------------------------------------------------------------------------------------

_P = 0x9E3779B97F4A7C15  # odd: invertible mod 2**64 (the golden-ratio constant of splitmix64)
_P_INV = pow(_P, -1, 1 << 64)


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: spreads raw ids over 64 bits before they are chained."""
    x = x.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


def _powers(base: int, n: int) -> np.ndarray:
    out = np.empty(n, dtype=np.uint64)
    out[0] = 1
    if n > 1:
        with np.errstate(over="ignore"):
            out[1:] = np.cumprod(np.full(n - 1, base, dtype=np.uint64), dtype=np.uint64)
    return out


def _rolling_hashes(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """h_i = sum_j<=i f(id_j) P^(i-j) mod 2**64 for each request: one hash per prefix, chained as vLLM's are."""
    longest = max((a.size for a in arrays), default=0)
    if longest == 0:
        return [np.zeros(0, dtype=np.uint64) for _ in arrays]
    pw, ipw = _powers(_P, longest), _powers(_P_INV, longest)
    out = []
    with np.errstate(over="ignore"):
        for a in arrays:
            n = a.size
            out.append(pw[:n] * np.cumsum(_mix64(a) * ipw[:n], dtype=np.uint64))
    return out


def _relabel(cat: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense labels 0..span-1: an offset when the ids are already small integers, else their ranks."""
    lo, hi = int(cat.min()), int(cat.max())
    if lo >= 0 and hi - lo < 4 * cat.size + 1024:
        return cat - lo, hi - lo + 1
    uniq, inverse = np.unique(cat, return_inverse=True)
    return inverse.astype(np.int64).ravel(), int(uniq.size)


def _is_function(keys: np.ndarray, values: np.ndarray, span: int) -> bool:
    """Whether each key always comes with the same value."""
    first = np.full(span, -2, dtype=np.int64)
    first[keys] = values
    return bool(np.array_equal(first[keys], values))


def chain_ids(ids: np.ndarray, lens: np.ndarray, out: np.ndarray) -> int:
    """Raw ids of consecutive requests (``lens`` ids each) -> chained ids 0..span-1 in ``out`` (one per distinct
    prefix; small integer ids that are already chained keep their gaps, so span is at most 4x their count);
    returns span. ``out`` may be ``ids`` itself."""
    total = int(ids.size)
    dense, span = _relabel(ids)
    starts = np.zeros(lens.size, dtype=np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    depth = np.arange(total, dtype=np.int64) - np.repeat(starts, lens)
    prev = np.empty_like(dense)
    prev[1:] = dense[:-1]
    prev[starts[lens > 0]] = -1
    # chained already when each id always follows the same id at the same depth: one check over (prev, depth)
    if not _is_function(dense, (prev + 1) * (int(depth.max()) + 1) + depth, span):
        arrays = np.split(ids, starts[1:])
        uniq, inverse = np.unique(np.concatenate(_rolling_hashes(arrays)), return_inverse=True)
        dense, span = inverse.astype(np.int64).ravel(), int(uniq.size)
    out[:] = dense
    return span


def stable_id(value: Any) -> int:
    """A string hash id as a 63-bit integer, the same in every process (Python's hash() is salted)."""
    digest = hashlib.blake2b(str(value).encode("utf-8", "replace"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


# ----------------------------------------------------------------------------------------------
# lines
# ----------------------------------------------------------------------------------------------

def _bounded_lines(fh) -> Iterator[bytes]:
    """Lines of at most MAX_LINE_BYTES + 1 bytes held (the rest of a longer one is read past, not kept)."""
    while line := fh.readline(MAX_LINE_BYTES + 1):
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            while (rest := fh.readline(1 << 20)) and not rest.endswith(b"\n"):
                pass
        yield line


def iter_lines(path: pathlib.Path, report: ReadReport) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of every non-empty line (formats.open_binary: gzip and its cap); a file cut short ends
    the iteration and says where."""
    line_no = 0
    try:
        with formats.open_binary(path, "trace") as fh:
            for line_no, line in enumerate(_bounded_lines(fh), start=1):
                if len(line) > MAX_LINE_BYTES:
                    report.bad(f"line {line_no}", f"longer than {MAX_LINE_BYTES >> 20} MiB")
                    continue
                if line.strip():
                    report.lines += 1
                    yield line_no, line
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        report.truncated = f"the compressed stream ends after line {line_no} ({exc or type(exc).__name__}); read up to there"
    except OSError as exc:
        raise BadInput(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None


def _json(line: bytes) -> Any:
    try:
        return parse_json(line, "the line", walk=False)
    except BadInput as exc:
        raise BadRecord(str(exc)[:120]) from None
    except UnicodeDecodeError as exc:
        raise BadRecord(f"not JSON ({exc.__class__.__name__}: {str(exc)[:60]})") from None


def number(value: Any, what: str, *, lo: float = 0.0, missing: float | None = None) -> float:
    """A finite number >= lo; ``missing`` when absent (None: required)."""
    if value is None:
        if missing is None:
            raise BadRecord(f"{what} is missing")
        return missing
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRecord(f"{what} must be a number, got {value!r:.40}")
    try:
        x = float(value)
    except OverflowError:  # an integer past a float's range
        x = math.inf
    if not math.isfinite(x) or x < lo:
        raise BadRecord(f"{what} must be a finite number >= {lo:g}, got {shown_number(value)}")
    return x


def tokens(value: Any, what: str, *, missing: float | None = None) -> int:
    """A token count of one request: a whole number in [0, ``MAX_REQUEST_TOKENS``] (a longer prompt than any
    model takes would only make a replay allocate its blocks), ``missing`` when absent (None: required)."""
    x = number(value, what, missing=missing)
    if x > MAX_REQUEST_TOKENS:
        raise BadRecord(f"{what} = {shown_number(value)} is past the {MAX_REQUEST_TOKENS:,} tokens of any request "
                        "(MAX_REQUEST_TOKENS)")
    return int(x)


def _ids_list(values: Any, what: str = "hash_ids") -> np.ndarray:
    """A JSON list of integer or string ids -> int64 (strings hashed stably)."""
    if not isinstance(values, list):
        raise BadRecord(f"{what} must be a list")
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        try:
            return np.asarray(values, dtype=np.int64)
        except OverflowError:
            pass
    if all(isinstance(v, (int, str)) and not isinstance(v, bool) for v in values):
        return np.asarray([stable_id(v) for v in values], dtype=np.int64)
    raise BadRecord(f"{what} must hold integers or strings")


# ----------------------------------------------------------------------------------------------
# Claude Code sessions
# ----------------------------------------------------------------------------------------------

_HASH_LIST = re.compile(rb'"hash_ids"\s*:\s*\[([^\]]*)\]')


def _fast_id_lists(lists: list[bytes]) -> list[np.ndarray]:
    """The captured ``[...]`` bodies -> int64 arrays, parsed in one pass (most of a trace's bytes are these)."""
    counts = [s.count(b",") + 1 if s.strip() else 0 for s in lists]
    joined = b",".join(s for s, n in zip(lists, counts) if n)
    if not joined:
        return [np.zeros(0, dtype=np.int64) for _ in lists]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            flat = np.fromstring(joined, dtype=np.int64, sep=",")  # noqa: NPY201 - the text mode is not deprecated
        except (ValueError, DeprecationWarning):
            flat = None
    if flat is None or flat.size != sum(counts):  # strings, floats or holes: read the slow way
        return [_ids_list(_json(b"[" + s + b"]")) for s in lists]
    return np.split(flat, np.cumsum(counts)[:-1])


@dataclass
class _ClaudeFile:
    """What the lines of one Claude Code file must agree on."""

    block_size: int | None = None
    scope: str | None = None


def _claude_request(b: TraceBuilder, req: Any, ids: list[np.ndarray], session: int, subagent: bool) -> None:
    if not isinstance(req, dict):
        raise BadRecord("a request must be an object")
    hid = req.get("hash_ids")
    if not isinstance(hid, int) or isinstance(hid, bool) or not 0 <= hid < len(ids):
        raise BadRecord("hash_ids is missing or not a list of ids")
    block_ids = ids[hid]
    inp = tokens(req.get("in"), "in")
    if block_ids.size * b.block_size > inp + b.block_size - 1:
        raise BadRecord(f"{block_ids.size:,} hash_ids cover more than in = {inp:,} tokens")
    b.add_request(session, number(req.get("t"), "t", missing=0.0), inp, tokens(req.get("out"), "out", missing=0.0),
                  block_ids, service_s=number(req.get("api_time"), "api_time", missing=math.nan), subagent=subagent)


def _claude_requests(b: TraceBuilder, reqs: list, ids: list[np.ndarray], session: int, where: str) -> None:
    """A session's requests (formats.claude_entries); each subagent becomes a session of its own, its start on its
    parent's clock. The requests of a subagent whose entry cannot be read are counted bad with it."""
    sessions: dict[tuple[int, ...], int | None] = {(): session}
    for e in formats.claude_entries(reqs, where):
        try:
            parent = sessions.get(e.path)
            if parent is None:
                raise BadRecord("in a subagent entry that could not be read")
            if e.opens_subagent:
                sessions[(*e.path, e.position)] = None
                info = SessionInfo(key=f"{b.sessions[parent].key}/{e.entry.get('agent_id', e.position)}", parent=parent,
                                   start_s=number(e.entry.get("t"), "t", missing=0.0),
                                   prefix_tokens=_prefix_tokens(e.entry))
                sessions[(*e.path, e.position)] = b.add_session(info)
            else:
                _claude_request(b, e.entry, ids, parent, bool(e.path))
        except BadRecord as exc:
            b.report.bad(e.where, str(exc), line=False)


def _prefix_tokens(rec: dict) -> int:
    """formats.prefix_tokens (system + tool tokens); an unreadable one counts as none (the session still replays)."""
    try:
        return int(formats.prefix_tokens(rec, lambda value, name: number(value, name, missing=0)))
    except BadRecord:
        return 0


def _claude_line(b: TraceBuilder, state: _ClaudeFile, line_no: int, line: bytes) -> None:
    lists: list[bytes] = []

    def grab(m: re.Match) -> bytes:
        lists.append(m.group(1))
        return b'"hash_ids":%d' % (len(lists) - 1)

    rec = _json(_HASH_LIST.sub(grab, line))
    if not isinstance(rec, dict) or not isinstance(rec.get("requests"), list):
        raise BadRecord("expected a session object with a requests list")
    size = int(number(rec.get("block_size"), "block_size", lo=1, missing=b.block_size))
    scope = str(rec.get("hash_id_scope", "local"))
    if state.block_size is None:
        state.block_size, state.scope = size, scope
    if size != state.block_size or scope != state.scope:
        raise BadRecord(f"block_size {size} / hash_id_scope {scope!r} differ from the first line's "
                        f"({state.block_size} / {state.scope!r})")
    ids = _fast_id_lists(lists)
    if scope != "global":
        b.new_namespace()
    key = str(rec.get("id", f"line {line_no}"))
    session = b.add_session(SessionInfo(key=key, prefix_tokens=_prefix_tokens(rec)))
    _claude_requests(b, rec["requests"], ids, session, f"line {line_no} ({key})")


def read_claude_code(path: pathlib.Path, lines: Iterator[tuple[int, bytes]], report: ReadReport, first: dict) -> Trace:
    stated = first.get("block_size")
    size = stated if isinstance(stated, int) and not isinstance(stated, bool) and stated > 0 else 64
    b = TraceBuilder("claude-code", size, "session", report)
    state = _ClaudeFile()
    for line_no, line in lines:
        try:
            _claude_line(b, state, line_no, line)
        except BadRecord as exc:
            report.bad(f"line {line_no}", str(exc))
    b.block_size = state.block_size or size
    return b.build(path.name)


# ----------------------------------------------------------------------------------------------
# Mooncake and other one-request-per-line hash traces
# ----------------------------------------------------------------------------------------------

def read_hash_jsonl(path: pathlib.Path, lines: Iterator[tuple[int, bytes]], report: ReadReport, first: dict,
                    block_size: int | None) -> Trace:
    stated = first.get("block_size")
    size = block_size or (int(stated) if isinstance(stated, int) and stated > 0 else MOONCAKE_BLOCK_SIZE)
    if block_size is None and not isinstance(stated, int):
        report.notes.append(f"block size {MOONCAKE_BLOCK_SIZE} tokens per hash id assumed (Mooncake FAST'25); "
                            "the records do not say (--trace-block-size sets it)")
    b = TraceBuilder("mooncake", size, "trace", report)
    for line_no, line in lines:
        try:
            rec = _json(line)
            if not isinstance(rec, dict):
                raise BadRecord("expected an object")
            ids = _ids_list(rec.get("hash_ids"))
            inp = tokens(rec.get("input_length"), "input_length")
            if ids.size * size > inp + size - 1:
                raise BadRecord(f"{ids.size:,} hash_ids cover more than input_length = {inp:,} tokens")
            t = number(rec.get("timestamp"), "timestamp", missing=float(line_no)) / 1000.0
            session = b.add_session(SessionInfo(key=str(rec.get("id", f"line {line_no}"))))
            b.add_request(session, t, inp, tokens(rec.get("output_length"), "output_length", missing=0.0), ids)
        except BadRecord as exc:
            report.bad(f"line {line_no}", str(exc))
    spread = spread_ticks(np.asarray(b._cols["t"], dtype=np.float64))
    if spread is not None:
        b._cols["t"] = list(spread.t_s)
        report.notes.append(spread.note)
    return b.build(path.name)


MIN_TICK_SHARE = 2.0  # requests a distinct timestamp, on average, from which a regular clock is read as rounded


@frozen
class Ticks:
    """A clock's arrivals spread over the tick they were rounded to (``spread_ticks``)."""

    t_s: np.ndarray
    note: str


def spread_ticks(t_s: np.ndarray, seed: int = DEFAULT_SEED) -> Ticks | None:
    """Arrivals (seconds, file order) written on a coarse regular clock: at least ``MIN_TICK_SHARE`` requests a
    distinct timestamp on average, the timestamps a nearly constant step apart (the shortest step at least half the
    median: Mooncake's conversation trace has 12,031 requests on 1,180 timestamps 2,997-3,003 ms apart). Such a
    clock rounded the arrivals to its ticks: each tick's requests are placed at sorted uniform draws over the time
    to the next tick (the median step after the last), their order kept: the arrival times of a Poisson process
    given how many arrived in the interval. Replayed as written, a tick's requests would reach the engine at one
    instant, a burst of prefills the clients never sent. None where the clock is not such (each request its own
    timestamp, as in Mooncake's synthetic trace) or the file is not in time order."""
    if t_s.size < 2 or np.any(np.diff(t_s) < 0):
        return None
    distinct, first, counts = np.unique(t_s, return_index=True, return_counts=True)
    if distinct.size < 2 or t_s.size < MIN_TICK_SHARE * distinct.size:
        return None
    steps = np.diff(distinct)
    step = float(median(steps))
    if not float(steps.min()) >= 0.5 * step:
        return None
    width = np.append(steps, step)
    tick = np.repeat(np.arange(distinct.size), counts)  # in time order, so each tick's requests are contiguous
    u = np.random.default_rng(seed).random(t_s.size)
    u = u[np.lexsort((u, tick))]                       # sorted within each tick
    out = t_s + u * width[tick]
    note = (f"timestamps on a {step * 1000:,.0f} ms clock ({t_s.size:,} requests on {distinct.size:,} ticks, up to "
            f"{int(counts.max()):,} on one): each tick's requests are spread at uniform draws over it, in file order "
            "(a Poisson process's arrivals given their count), not sent at one instant")
    return Ticks(out, note)


# ----------------------------------------------------------------------------------------------
# logs without ids: each session's prompt extends its previous one
# ----------------------------------------------------------------------------------------------

class PrefixChains:
    """Makes ids for prompts that extend each other: a shared prefix, then one growing chain per session.

    A session's request of n tokens shares its first min(n, previous n) tokens with the previous request
    of that session (and the shared prefix's blocks with every session); ``restart`` begins a new chain
    (a salted or rewritten prompt matches nothing)."""

    def __init__(self, block_size: int = MADE_BLOCK_SIZE):
        self.block_size = block_size
        self._next = 0
        self._shared: dict[str, np.ndarray] = {}
        self._chains: dict[Any, tuple[np.ndarray, int]] = {}

    def _fresh(self, n: int) -> np.ndarray:
        out = np.arange(self._next, self._next + n, dtype=np.int64)
        self._next += n
        return out

    def _prefix(self, name: str, k: int) -> np.ndarray:
        have = self._shared.get(name, np.zeros(0, dtype=np.int64))
        if have.size < k:
            have = self._shared[name] = np.concatenate([have, self._fresh(k - have.size)])
        return have[:k]

    def ids(self, session: Any, tokens: int, *, shared: str = "", shared_tokens: int = 0, restart: bool = False) -> np.ndarray:
        """The ids of a prompt of ``tokens`` tokens (one per block, the last one partial)."""
        size = self.block_size
        prev = None if restart else self._chains.get(session)
        if prev is None:
            keep = self._prefix(shared, min(shared_tokens, tokens) // size) if shared and not restart else _EMPTY
        else:
            keep = prev[0][:min(tokens, prev[1]) // size]  # the previous prompt's full blocks this one repeats
        out = np.concatenate([keep, self._fresh(-(-tokens // size) - keep.size)])
        self._chains[session] = (out, tokens)
        return out


_EMPTY = np.zeros(0, dtype=np.int64)


def _time_s(value: Any) -> float:
    x = number(value, "timestamp")
    return x / 1000.0 if x > 1e11 else x  # milliseconds since the epoch read as seconds


def read_openai(path: pathlib.Path, records: Iterator[tuple[int, Any]], report: ReadReport, *,
                session_field: str | None = None, prefix_tokens: int = 0) -> Trace:
    b = TraceBuilder("openai", MADE_BLOCK_SIZE, "trace", report)
    chains = PrefixChains()
    keys: dict[Any, int] = {}
    fields = (session_field,) if session_field else SESSION_FIELDS
    for where, rec in records:
        try:
            if not isinstance(rec, dict):
                raise BadRecord("expected an object")
            u = usage(rec) or {}
            prompt = tokens(u.get("prompt_tokens"), "usage.prompt_tokens")
            cached = number(dotted(u, "prompt_tokens_details.cached_tokens"), "cached_tokens", missing=math.nan)
            key = first_field(rec, fields)
            key = f"record {where}" if key is None else str(key)
            if key not in keys:
                keys[key] = b.add_session(SessionInfo(key=key))
            t = first_field(rec, TIME_FIELDS)
            ids = chains.ids(key, prompt, shared="prefix" if prefix_tokens else "", shared_tokens=prefix_tokens)
            b.add_request(keys[key], _time_s(t) if t is not None else float(where), prompt,
                          tokens(u.get("completion_tokens"), "usage.completion_tokens", missing=0.0), ids, cached=cached)
        except BadRecord as exc:
            report.bad(f"record {where}", str(exc))
    report.notes.append("no block ids in the log: each request is taken to extend its session's previous prompt "
                        "(append-only history)" + (f", after a shared prefix of {prefix_tokens:,} tokens" if prefix_tokens else ""))
    return b.build(path.name)


# ----------------------------------------------------------------------------------------------
# servesize measure sessions records
# ----------------------------------------------------------------------------------------------

def _measure_request(b: TraceBuilder, chains: PrefixChains, keys: dict, segment: int, e: dict, t0: list) -> None:
    r = e.get("result")
    if not isinstance(r, dict) or not isinstance(r.get("tags"), dict):
        raise BadRecord("a request event without its result")
    if not r.get("ok", r.get("error") is None):
        b.report.skip("failed requests (the engine computed nothing to cache)")
        return
    tags = r["tags"]
    prompt = r.get("prompt_tokens")
    if not isinstance(prompt, int) or prompt <= 0:
        b.report.skip("requests without the server's prompt_tokens")
        return
    prompt = tokens(prompt, "prompt_tokens")
    key = (segment, str(tags.get("session")))
    if key not in keys:
        keys[key] = b.add_session(SessionInfo(key=f"{key[1]}" if segment == 0 else f"{key[1]}@{segment}",
                                              prefix_tokens=int(number(tags.get("prefix_tokens"), "prefix_tokens", missing=0))))
    sent = number(r.get("t_sent_ns"), "t_sent_ns")
    if not t0:
        t0.append(sent)
    kind = str(tags.get("kind", "user"))
    ids = chains.ids(key, prompt, shared=kind, shared_tokens=int(number(tags.get("prefix_tokens"), "prefix_tokens", missing=0)),
                     restart=bool(tags.get("salted")))
    b.add_request(keys[key], (sent - t0[0]) / 1e9, prompt, tokens(r.get("completion_tokens") or 0, "completion_tokens"), ids,
                  service_s=number(r.get("end_s"), "end_s", missing=math.nan), subagent=kind == "subagent",
                  cached=number(r.get("cached_tokens"), "cached_tokens", missing=math.nan),
                  group=int(number(e.get("rung"), "rung", missing=-1, lo=-1)))


def read_measure(path: pathlib.Path, lines: Iterator[tuple[int, bytes]], report: ReadReport, header: dict) -> Trace:
    if header.get("kind") != "sessions":
        raise BadInput(f"{path}: a 'measure {header.get('kind')}' record holds probes, not sessions; "
                       "replay a 'measure sessions' record")
    b = TraceBuilder("measure", MADE_BLOCK_SIZE, "trace", report)
    chains = PrefixChains()
    keys: dict[tuple[int, str], int] = {}
    t0: list[float] = []
    segment = 0
    for line_no, line in lines:
        try:
            e = _json(line)
            kind = e.get("type") if isinstance(e, dict) else None
            if kind == "segment":
                segment += 1
            elif kind == "request":
                _measure_request(b, chains, keys, segment, e, t0)
        except BadRecord as exc:
            report.bad(f"line {line_no}", str(exc))
    report.notes.append("block ids made from the record: each prompt extends its session's previous one after the "
                        "class's shared prefix (as measure sessions builds them); a salted turn matches nothing")
    return b.build(path.name)


# ----------------------------------------------------------------------------------------------
# detection and the entry point
# ----------------------------------------------------------------------------------------------

def _detect(first: Any) -> str:
    """formats.detect, for the formats a replay can take (a Mooncake-style line needs its hash_ids)."""
    if not isinstance(first, dict):
        raise BadInput("the first record is not a JSON object: expected JSONL (one object per line)")
    found = formats.detect(first)
    if found in FORMATS and (found != "mooncake" or "hash_ids" in first):
        return found
    raise BadInput("not a trace servesize can replay: expected Claude Code sessions (requests[].hash_ids), Mooncake "
                   "lines (hash_ids, input_length), OpenAI usage records (usage.prompt_tokens) or a measure sessions record")


def _peek(path: pathlib.Path, report: ReadReport) -> tuple[Any, Iterator[tuple[int, bytes]]]:
    """The first record (parsed, hash lists elided) and an iterator over every line, the first included."""
    lines = iter_lines(path, report)
    for line_no, line in lines:
        try:
            first = _json(_HASH_LIST.sub(b'"hash_ids":[]', line))
        except BadRecord as exc:
            report.bad(f"line {line_no}", str(exc))
            continue

        def chained(first_line=(line_no, line)) -> Iterator[tuple[int, bytes]]:
            yield first_line
            yield from lines
        return first, chained()
    raise BadInput(f"{path}: the file holds no records" + (f" ({report.summary()})" if report.bad_lines else ""))


def _array_records(path: pathlib.Path, report: ReadReport) -> Iterator[tuple[int, Any]]:
    """A JSON array's elements, one at a time (formats.json_array), each counted as a line."""
    for n, rec in formats.json_array(path, "trace"):
        report.lines += 1
        yield n, rec


def _parsed(lines: Iterator[tuple[int, bytes]], report: ReadReport) -> Iterator[tuple[int, Any]]:
    for line_no, line in lines:
        try:
            yield line_no, _json(line)
        except BadRecord as exc:
            report.bad(f"line {line_no}", str(exc))


Reader = Callable[..., Trace]


def read_trace(path, *, format: str | None = None, block_size: int | None = None, session_field: str | None = None,
               prefix_tokens: int = 0) -> Trace:
    """Read a trace file (format detected unless given; gzip allowed).

    ``block_size``: tokens per id for hash traces whose records do not say (Mooncake's 512 otherwise);
    ``session_field`` / ``prefix_tokens``: for OpenAI-style logs (which field names the session; a shared prefix)."""
    p = pathlib.Path(path)
    if format is not None and format not in FORMATS:
        raise BadInput(f"unknown trace format {format!r}; choose one of: {', '.join(FORMATS)}")
    report = ReadReport(str(p))
    if formats.first_char(p, "trace") == "[":
        report.format = "openai"
        return read_openai(p, _array_records(p, report), report, session_field=session_field, prefix_tokens=prefix_tokens)
    first, lines = _peek(p, report)
    fmt = format or _detect(first)
    report.format = fmt
    if fmt == "claude-code":
        return read_claude_code(p, lines, report, first)
    if fmt == "mooncake":
        return read_hash_jsonl(p, lines, report, first, block_size)
    if fmt == "openai":
        return read_openai(p, _parsed(lines, report), report, session_field=session_field, prefix_tokens=prefix_tokens)
    next(lines)  # the header
    return read_measure(p, lines, report, first)
