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
from dataclasses import dataclass, field

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
    user: list = field(default_factory=list)
    subagent: list = field(default_factory=list)
    prefix_tokens: list = field(default_factory=list)        # per-session user prefix, when the file says
    subagent_prefix_tokens: list = field(default_factory=list)
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


def _read_csv(text: str, path: str, column: str | None) -> Observations:
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        raise BadInput(f"{path}: the file is empty") from None
    except csv.Error as exc:
        raise BadInput(f"{path}: not a readable CSV file: {exc}") from None
    names = [h.strip() for h in header]
    if column is not None:
        if column not in names:
            raise BadInput(f"{path}: no column {column!r} in the CSV header (columns: {', '.join(names[:12])})")
        col = column
    else:
        col = next((c for c in CSV_COLUMNS if c in names), None)
        if col is None:
            raise BadInput(f"{path}: no token column found (tried {', '.join(CSV_COLUMNS)}); name one with --column")
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


def _records(text: str, path: str):
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadInput(f"{path}: not valid JSON: {exc.msg} (line {exc.lineno})") from None
        for n, rec in enumerate(data, start=1):
            yield n, rec
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


def _detect(rec: dict, column: str | None) -> str | None:
    if column is not None:
        return "column"
    reqs = rec.get("requests")
    if isinstance(reqs, list) and any(isinstance(r, dict) and "in" in r for r in reqs):
        return "claude-code"
    u = _usage(rec)
    if u is not None and "prompt_tokens" in u:
        return "openai"
    if u is not None and "input_tokens" in u:
        return "anthropic"
    if "input_length" in rec:
        return "mooncake"
    for c in CSV_COLUMNS:
        if c in rec:
            return "flat"
    return None


def _read_json_records(text: str, path: str, column: str | None) -> Observations:
    obs: Observations | None = None
    kind = None
    flat_key = None
    for where, rec in _records(text, path):
        loc = f"{path} record {where}"
        if not isinstance(rec, dict):
            raise BadInput(f"{loc}: expected a JSON object, got {type(rec).__name__}")
        if kind is None:
            kind = _detect(rec, column)
            if kind is None:
                raise BadInput(f"{loc}: no token count recognised (usage.prompt_tokens, requests[].in, "
                               "input_length, prompt_tokens, ...); name the field with --column")
            described = {
                "column": f"field {column!r}", "claude-code": "requests[].in (input tokens per request)",
                "openai": "usage.prompt_tokens", "anthropic": "usage input + cache read + cache creation tokens",
                "mooncake": "input_length",
            }
            if kind == "flat":
                flat_key = next(c for c in CSV_COLUMNS if c in rec)
                described["flat"] = f"field {flat_key!r}"
            obs = Observations(path, {"column": "jsonl", "flat": "jsonl"}.get(kind, kind), described[kind])
        obs.records += 1
        if kind == "column":
            x = _number(_dotted(rec, column), f"{loc}, field {column!r}")
            if x is not None:
                obs.user.append(x)
        elif kind == "flat":
            x = _number(rec.get(flat_key), f"{loc}, field {flat_key!r}")
            if x is not None:
                obs.user.append(x)
        elif kind == "mooncake":
            x = _number(rec.get("input_length"), f"{loc}, field 'input_length'")
            if x is not None:
                obs.user.append(x)
        elif kind == "openai":
            u = _usage(rec) or {}
            x = _number(u.get("prompt_tokens"), f"{loc}, usage.prompt_tokens")
            if x is not None:
                obs.user.append(x)
                cached = _number(_dotted(u, "prompt_tokens_details.cached_tokens"), f"{loc}, usage.prompt_tokens_details.cached_tokens")
                if cached is not None:
                    obs.cached_tokens += cached
                    obs.cached_prompt_tokens += x
        elif kind == "anthropic":
            u = _usage(rec) or {}
            parts = [_number(u.get(k), f"{loc}, usage.{k}") for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")]
            if parts[0] is not None:
                total = sum(p for p in parts if p is not None)
                obs.user.append(total)
                if parts[1] is not None:
                    obs.cached_tokens += parts[1]
                    obs.cached_prompt_tokens += total
        else:  # claude-code
            reqs = rec.get("requests")
            if not isinstance(reqs, list):
                raise BadInput(f"{loc}: expected a 'requests' list (Claude Code session format)")
            prefix = _number(rec.get("system_tokens"), f"{loc}, system_tokens") or 0.0
            prefix += _number(rec.get("tool_tokens"), f"{loc}, tool_tokens") or 0.0
            if prefix > 0:
                obs.prefix_tokens.append(prefix)
            for j, r in enumerate(reqs):
                if not isinstance(r, dict):
                    raise BadInput(f"{loc}, requests[{j}]: expected an object")
                if r.get("type") == "subagent" and isinstance(r.get("requests"), list):
                    sp = (_number(r.get("system_tokens"), f"{loc}, requests[{j}].system_tokens") or 0.0) + (
                        _number(r.get("tool_tokens"), f"{loc}, requests[{j}].tool_tokens") or 0.0)
                    if sp > 0:
                        obs.subagent_prefix_tokens.append(sp)
                    for k, q in enumerate(r["requests"]):
                        x = _number(q.get("in") if isinstance(q, dict) else None, f"{loc}, requests[{j}].requests[{k}].in")
                        if x is not None:
                            obs.subagent.append(x)
                    continue
                x = _number(r.get("in"), f"{loc}, requests[{j}].in")
                if x is not None:
                    obs.user.append(x)
    if obs is None:
        raise BadInput(f"{path}: the file holds no records")
    return obs


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
