"""Request logs -> prompt token counts (the observations ``workload fit`` fits).

Formats, detected from the content (gzip allowed, detected from the magic bytes):

- CSV with a header: the ``--column`` named, else the first of the usual names
  (prompt_tokens, input_tokens, input_length, ...).
- JSONL (one object per line) or a JSON array of objects:
  - OpenAI-style usage records: ``usage.prompt_tokens`` (also under ``response`` or
    ``response.body``, as the batch API writes it); ``usage.prompt_tokens_details.cached_tokens``
    gives the observed prefix-cache hit rate;
  - Anthropic-style usage: ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``;
  - Claude Code sessions (kv-cache-tester traces, one session per line): every top-level
    ``requests[].in`` (the full input tokens of that request: ``in`` = 64 x the number of
    prefix-block hashes) is a user-class request; requests nested inside ``type: subagent``
    entries are subagent-class; ``system_tokens + tool_tokens`` of a session is its prefix;
  - Mooncake traces: ``input_length``;
  - any object with ``--column`` as a dotted path (``usage.prompt_tokens``).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import pathlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from servesize.errors import BadInput

CSV_COLUMNS = ("prompt_tokens", "input_tokens", "input_length", "prompt_len", "prompt_length",
               "num_prompt_tokens", "context_tokens", "tokens", "in")
_HASH_IDS = re.compile(r'"hash_ids":\s*\[[0-9,\s]*\]')


@dataclass
class Observations:
    """Prompt token counts read from one file."""

    path: str
    format: str
    field: str                       # what was read, in words
    user: list[float] = dataclass_field(default_factory=list)
    subagent: list[float] = dataclass_field(default_factory=list)
    prefix_tokens: list[float] = dataclass_field(default_factory=list)  # per-session user prefix, when the file says
    subagent_prefix_tokens: list[float] = dataclass_field(default_factory=list)
    cached_tokens: float = 0.0       # sum of cached prompt tokens over records that report them
    cached_prompt_tokens: float = 0.0  # sum of prompt tokens over those same records
    records: int = 0


def _open_text(path: pathlib.Path) -> str:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BadInput(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise BadInput(f"{str(path)!r} looks gzip-compressed but cannot be decompressed: {exc}") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise BadInput(f"{str(path)!r} is not UTF-8 text (CSV, JSONL or JSON, optionally gzip)") from None


def _number(value, where: str) -> float | None:
    """A token count, None for an empty cell; anything else is an error naming where."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise BadInput(f"{where}: expected a token count, got {value!r}")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise BadInput(f"{where}: expected a token count, got {value!r}") from None
    if not math.isfinite(x) or x < 0:
        raise BadInput(f"{where}: expected a token count >= 0, got {value!r}")
    return x


def _dotted(obj, path: str):
    for part in path.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def _usage(obj: dict):
    for path in ("usage", "response.usage", "response.body.usage", "body.usage"):
        u = _dotted(obj, path)
        if isinstance(u, dict):
            return u
    return None


def _csv_column(names: list[str], column: str | None, path: str) -> str:
    """The column to read: the one named, else the first of the usual names the header has."""
    if column is not None:
        if column not in names:
            raise BadInput(f"{path}: no column {column!r} in the CSV header (columns: {', '.join(names[:12])})")
        return column
    found = next((c for c in CSV_COLUMNS if c in names), None)
    if found is None:
        raise BadInput(f"{path}: no token column found (tried {', '.join(CSV_COLUMNS)}); name one with --column")
    return found


def _read_csv(text: str, path: str, column: str | None) -> Observations:
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        raise BadInput(f"{path}: the file is empty") from None
    except csv.Error as exc:
        raise BadInput(f"{path}: not a readable CSV file: {exc}") from None
    names = [h.strip() for h in header]
    col = _csv_column(names, column, path)
    i = names.index(col)
    obs = Observations(path, "csv", f"column {col!r}")
    try:
        for line_no, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            obs.records += 1
            if i >= len(row):
                raise BadInput(f"{path} line {line_no}: the row has no {col!r} cell")
            x = _number(row[i], f"{path} line {line_no}, column {col!r}")
            if x is not None:
                obs.user.append(x)
    except csv.Error as exc:
        raise BadInput(f"{path}: not a readable CSV file: {exc}") from None
    return obs


def _records(text: str, path: str) -> Iterator[tuple[int, Any]]:
    """(record number or line number, parsed value) for a JSON array or JSONL text."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadInput(f"{path}: not valid JSON: {exc.msg} (line {exc.lineno})") from None
        yield from enumerate(data, start=1)
        return
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if '"hash_ids"' in line:
            # prefix-block hash lists are most of a trace's bytes and are not needed here:
            # dropping them before parsing makes reading ~5x faster
            line = _HASH_IDS.sub('"hash_ids":null', line)
        try:
            yield line_no, json.loads(line)
        except json.JSONDecodeError as exc:
            raise BadInput(f"{path} line {line_no}: not valid JSON ({exc.msg}); expected one JSON object per line") from None


# --------------------------------------------------------------------------------------------
# JSON records: one reader per format, the format chosen from the first record
# --------------------------------------------------------------------------------------------

# Adds one record's token counts to the observations; the str says where the record is, for errors.
_RecordReader = Callable[[dict, str, Observations], None]


@dataclass(frozen=True)
class _JsonFormat:
    format: str  # Observations.format
    field: str  # what is read, in words (Observations.field)
    read: _RecordReader


def _observe_cached(obs: Observations, cached_tokens: float, prompt_tokens: float) -> None:
    """A record that reports its prefix-cache hits counts towards the observed hit rate."""
    obs.cached_tokens += cached_tokens
    obs.cached_prompt_tokens += prompt_tokens


def _field_reader(field_path: str) -> _RecordReader:
    """One token count per record, at a (dotted) field path."""
    def read(rec: dict, loc: str, obs: Observations) -> None:
        x = _number(_dotted(rec, field_path), f"{loc}, field {field_path!r}")
        if x is not None:
            obs.user.append(x)
    return read


def _read_openai(rec: dict, loc: str, obs: Observations) -> None:
    """usage.prompt_tokens, and usage.prompt_tokens_details.cached_tokens where the record reports it."""
    u = _usage(rec) or {}
    x = _number(u.get("prompt_tokens"), f"{loc}, usage.prompt_tokens")
    if x is None:
        return
    obs.user.append(x)
    cached = _number(_dotted(u, "prompt_tokens_details.cached_tokens"), f"{loc}, usage.prompt_tokens_details.cached_tokens")
    if cached is not None:
        _observe_cached(obs, cached, x)


def _read_anthropic(rec: dict, loc: str, obs: Observations) -> None:
    """The prompt is input + cache read + cache creation tokens; the cache reads are its prefix-cache hits."""
    u = _usage(rec) or {}
    fresh, cache_read, cache_creation = (_number(u.get(k), f"{loc}, usage.{k}")
                                         for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))
    if fresh is None:
        return
    total = sum(p for p in (fresh, cache_read, cache_creation) if p is not None)
    obs.user.append(total)
    if cache_read is not None:
        _observe_cached(obs, cache_read, total)


def _prefix_tokens(obj: dict, where: str) -> float:
    """system_tokens + tool_tokens: the prefix a session (or a subagent) sends with every request."""
    return ((_number(obj.get("system_tokens"), f"{where}system_tokens") or 0.0)
            + (_number(obj.get("tool_tokens"), f"{where}tool_tokens") or 0.0))


def _is_subagent(request: dict) -> bool:
    return request.get("type") == "subagent" and isinstance(request.get("requests"), list)


def _read_subagent(subagent: dict, where: str, obs: Observations) -> None:
    """A subagent entry: its own prefix, and its nested requests[].in as subagent-class requests."""
    prefix = _prefix_tokens(subagent, f"{where}.")
    if prefix > 0:
        obs.subagent_prefix_tokens.append(prefix)
    for k, q in enumerate(subagent["requests"]):
        x = _number(q.get("in") if isinstance(q, dict) else None, f"{where}.requests[{k}].in")
        if x is not None:
            obs.subagent.append(x)


def _read_claude_code(rec: dict, loc: str, obs: Observations) -> None:
    """One session: its prefix, every top-level requests[].in as a user-class request, subagents apart."""
    reqs = rec.get("requests")
    if not isinstance(reqs, list):
        raise BadInput(f"{loc}: expected a 'requests' list (Claude Code session format)")
    prefix = _prefix_tokens(rec, f"{loc}, ")
    if prefix > 0:
        obs.prefix_tokens.append(prefix)
    for j, r in enumerate(reqs):
        where = f"{loc}, requests[{j}]"
        if not isinstance(r, dict):
            raise BadInput(f"{where}: expected an object")
        if _is_subagent(r):
            _read_subagent(r, where, obs)
            continue
        x = _number(r.get("in"), f"{where}.in")
        if x is not None:
            obs.user.append(x)


def _has_claude_code_requests(rec: dict) -> bool:
    reqs = rec.get("requests")
    return isinstance(reqs, list) and any(isinstance(r, dict) and "in" in r for r in reqs)


def _usage_has(key: str) -> Callable[[dict], bool]:
    return lambda rec: key in (_usage(rec) or {})


def _field_format(field_path: str) -> _JsonFormat:
    """A token count at a named field: --column (a dotted path), or one of the usual names."""
    return _JsonFormat("jsonl", f"field {field_path!r}", _field_reader(field_path))


# The formats a first record is recognised by, tried in this order.
_FORMATS: tuple[tuple[Callable[[dict], bool], _JsonFormat], ...] = (
    (_has_claude_code_requests, _JsonFormat("claude-code", "requests[].in (input tokens per request)", _read_claude_code)),
    (_usage_has("prompt_tokens"), _JsonFormat("openai", "usage.prompt_tokens", _read_openai)),
    (_usage_has("input_tokens"), _JsonFormat("anthropic", "usage input + cache read + cache creation tokens", _read_anthropic)),
    (lambda rec: "input_length" in rec, _JsonFormat("mooncake", "input_length", _field_reader("input_length"))),
)


def _detect(rec: dict, column: str | None) -> _JsonFormat | None:
    """The format of a file, from its first record: --column if given, else the first format the record matches,
    else the first of the usual names among its fields."""
    if column is not None:
        return _field_format(column)
    found = next((fmt for matches, fmt in _FORMATS if matches(rec)), None)
    if found is not None:
        return found
    flat_key = next((c for c in CSV_COLUMNS if c in rec), None)
    return _field_format(flat_key) if flat_key is not None else None


def _read_json_records(text: str, path: str, column: str | None) -> Observations:
    """JSONL or a JSON array of objects, every record read in the format the first one shows."""
    found: tuple[_JsonFormat, Observations] | None = None
    for where, rec in _records(text, path):
        loc = f"{path} record {where}"
        if not isinstance(rec, dict):
            raise BadInput(f"{loc}: expected a JSON object, got {type(rec).__name__}")
        if found is None:
            fmt = _detect(rec, column)
            if fmt is None:
                raise BadInput(f"{loc}: no token count recognised (usage.prompt_tokens, requests[].in, "
                               "input_length, prompt_tokens, ...); name the field with --column")
            found = fmt, Observations(path, fmt.format, fmt.field)
        fmt, obs = found
        obs.records += 1
        fmt.read(rec, loc, obs)
    if found is None:
        raise BadInput(f"{path}: the file holds no records")
    return found[1]


def read_token_counts(path, column: str | None = None) -> Observations:
    """Prompt token counts from a CSV, JSONL or JSON file (gzip allowed), format auto-detected."""
    p = pathlib.Path(path)
    text = _open_text(p)
    if not text.strip():
        raise BadInput(f"{str(p)!r}: the file is empty")
    first = text.lstrip()[:1]
    if first in "{[":
        return _read_json_records(text, str(p), column)
    return _read_csv(text, str(p), column)
