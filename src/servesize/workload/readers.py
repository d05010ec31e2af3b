"""Request logs -> what they say about the workload (the observations ``workload fit`` fits).

Formats, detected from the content (gzip allowed, detected from the magic bytes):

- CSV with a header: the ``--column`` named, else the first of the usual names (prompt_tokens,
  input_tokens, input_length, ContextTokens, ...; matched without regard to case), and where the
  header has them: output tokens (completion_tokens, output_tokens, GeneratedTokens, ...), cached
  tokens, a think time, a session id with a timestamp (think time from the gaps), a request class
  (``subagent`` marks a subagent request);
- JSONL (one object per line) or a JSON array of objects:
  - OpenAI-style usage records: ``usage.prompt_tokens`` (also under ``response`` or
    ``response.body``, as the batch API writes it), ``usage.completion_tokens``,
    ``usage.prompt_tokens_details.cached_tokens`` (the observed prefix-cache hits);
  - Anthropic-style usage: ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``,
    ``output_tokens``; the cache reads are the hits;
  - Claude Code sessions (kv-cache-tester traces, one session per line): every top-level
    ``requests[].in`` is a user-class request, its ``out`` the output, the gaps between its ``t`` the
    think time; requests nested inside ``type: subagent`` entries are subagent-class;
    ``system_tokens + tool_tokens`` is the session's prefix; ``hash_ids`` (``block_size`` tokens per
    id, unique within a session) tell which requests found a cached prefix of their own;
  - Mooncake traces: ``input_length``, ``output_length``; ``hash_ids`` (512 tokens per id, global):
    the leading blocks more than half the requests share are the shared prefix;
  - any object with ``--column`` as a dotted path (``usage.prompt_tokens``).

A row whose count cannot be read (a word, NaN, a negative or empty cell, a truncated JSON line) is
skipped and counted, never fatal unless nothing readable is left; a file that is not one of these
formats at all is refused.
"""

from __future__ import annotations

import csv
import math
import pathlib
import re
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

import servesize.workload.formats as formats
from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.limits import parse_json
from servesize.workload.formats import MOONCAKE_BLOCK_TOKENS, dotted, first_char, json_array, text_lines, usage

CSV_COLUMNS = ("prompt_tokens", "input_tokens", "input_length", "prompt_len", "prompt_length",
               "num_prompt_tokens", "context_tokens", "contexttokens", "tokens", "in")
OUTPUT_COLUMNS = ("completion_tokens", "output_tokens", "output_length", "generated_tokens", "generatedtokens",
                  "num_output_tokens", "out")
CACHED_COLUMNS = ("cached_tokens", "cached_prompt_tokens", "cache_read_input_tokens", "cached_input_tokens")
THINK_COLUMNS = ("think_time_s", "think_time", "think_s")
SESSION_COLUMNS = ("session_id", "session", "conversation_id", "conversation", "user_id")
TIME_COLUMNS = ("timestamp", "time", "t", "created", "start_time")
CLASS_COLUMNS = ("request_class", "class", "type", "role")
HASH_IDS_KEPT = 1024          # leading hash ids kept per request: enough to reach past any shared prefix
MAX_SKIP_EXAMPLES = 3
_HASH_IDS = re.compile(r'"hash_ids":\s*\[([0-9,\s]*)\]')
_ID_TYPES = {int, str}  # what a block id may be (JSON numbers and strings; not bool)


def floats() -> array:
    """A growing column of float64 (8 bytes a value, against ~32 for a list of Python floats)."""
    return array("d")


def flags() -> array:
    """A growing column of 0/1 flags (1 byte a value)."""
    return array("b")


def column(values, *, flags: bool = False) -> array:
    """A numpy vector as an Observations column (float64, or 0/1 flags), copied as bytes, not value by value."""
    import numpy as np

    return array("b" if flags else "d", np.asarray(values, dtype=np.int8 if flags else np.float64).tobytes())


@dataclass
class Observations:
    """What one file says about its requests; columns are per request unless named otherwise.

    Columns are ``array('d')`` (``array('b')`` for flags): a 1 GiB log of 17.9M records keeps 8 bytes per value
    per column, not a Python float each; ``np.asarray`` reads them without a copy per value."""

    path: str
    format: str
    field: str                       # what was read as the prompt length, in words
    user: array = dataclass_field(default_factory=floats)
    subagent: array = dataclass_field(default_factory=floats)
    prefix_tokens: array = dataclass_field(default_factory=floats)  # per-session user prefix, when the file says
    subagent_prefix_tokens: array = dataclass_field(default_factory=floats)
    cached_tokens: float = 0.0       # sum of cached prompt tokens over records that report them
    cached_prompt_tokens: float = 0.0  # sum of prompt tokens over those same records
    cached_hits: array = dataclass_field(default_factory=floats)     # cached tokens, per request that reports them
    cached_prompts: array = dataclass_field(default_factory=floats)  # the same requests' prompt tokens
    cold: array = dataclass_field(default_factory=flags)  # per request, from hash blocks (infinite cache): 1 cold
    opens: array = dataclass_field(default_factory=flags)  # beside cold, else beside cached_hits, where the file has
                                                           # sessions: 1 where the request is its session's first
    cold_basis: str = ""
    hash_prefix_tokens: float | None = None   # leading blocks more than half of all requests share
    output: array = dataclass_field(default_factory=floats)
    output_field: str = ""
    gaps_s: array = dataclass_field(default_factory=floats)   # between one session's user-class requests
    turn_growth: array = dataclass_field(default_factory=floats)  # a session's prompt growth, request to request
    think_field: str = ""
    labels_field: str = ""           # what marked subagent requests, when anything did
    id_lists: list[list] = dataclass_field(default_factory=list, repr=False)  # leading hash ids (global-scope traces)
    records: int = 0
    skipped: int = 0
    skip_examples: list[str] = dataclass_field(default_factory=list)
    # a deployment's max_model_len: a prompt longer is left out as vLLM refuses it (read_token_counts'
    # max_prompt_tokens), with nothing of it in a session's pauses, growth or cache; None: every prompt is read
    max_prompt_tokens: float | None = None
    refused: int = 0

    def refuses(self, prompt: float) -> bool:
        """Whether a prompt this long is left out (longer than ``max_prompt_tokens``); counted when it is."""
        if self.max_prompt_tokens is not None and prompt > self.max_prompt_tokens:
            self.refused += 1
            return True
        return False

    def request(self, prompt: float, output: float | None, subagent: bool = False) -> None:
        """One request's prompt tokens (in the user or the subagent column) and its output tokens, where known."""
        (self.subagent if subagent else self.user).append(prompt)
        if output is not None:
            self.output.append(output)

    def skip(self, why: str) -> None:
        """A row that could not be read: counted, and its reason kept for the first few."""
        self.skipped += 1
        if len(self.skip_examples) < MAX_SKIP_EXAMPLES:
            self.skip_examples.append(why)


class _BadRow(Exception):
    """One unreadable row (skipped and counted)."""


def _number(value, where: str) -> float | None:
    """A token count or seconds; None for an absent or empty value; _BadRow for anything unreadable."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise _BadRow(f"{where}: {value!r} is not a number")
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise _BadRow(f"{where}: {str(value)[:40]!r} is not a number") from None
    if not math.isfinite(x) or x < 0:
        raise _BadRow(f"{where}: {value!r} is not a count >= 0")
    return x


def _count(value, where: str) -> float:
    """A prompt length: a number >= 1, else _BadRow (an empty cell is a row without its count)."""
    x = _number(value, where)
    if x is None:
        raise _BadRow(f"{where}: empty")
    if x < 1:
        raise _BadRow(f"{where}: {x:g} tokens (a prompt holds at least one)")
    return x


# --------------------------------------------------------------------------------------------
# CSV
# --------------------------------------------------------------------------------------------

def _find(names: list[str], wanted: tuple[str, ...]) -> int | None:
    lower = [n.lower() for n in names]
    return next((lower.index(w) for w in wanted if w in lower), None)


def _csv_column(names: list[str], column: str | None, path: str) -> int:
    """The column to read: the one named, else the first of the usual names the header has."""
    if column is not None:
        if column not in names:
            raise BadInput(f"{path}: no column {column!r} in the CSV header (columns: {', '.join(names[:12])})")
        return names.index(column)
    found = _find(names, CSV_COLUMNS)
    if found is None:
        raise BadInput(f"{path}: no token column found (tried {', '.join(CSV_COLUMNS)}); name one with --column")
    return found


@frozen
class _CsvLayout:
    prompt: int
    output: int | None
    cached: int | None
    think: int | None
    session: int | None
    time: int | None
    klass: int | None


def _cell(row: list[str], i: int | None) -> str | None:
    return row[i] if i is not None and i < len(row) else None


def _csv_time(text: str | None, where: str) -> float | None:
    """A timestamp in seconds: a number, or an ISO date and time."""
    if text is None or not text.strip():
        return None
    try:
        return float(text)
    except ValueError:
        pass
    from datetime import datetime
    try:
        return datetime.fromisoformat(text.strip()[:26]).timestamp()
    except ValueError:
        raise _BadRow(f"{where}: {text!r} is not a timestamp") from None


def _read_csv_row(row: list[str], lay: _CsvLayout, where: str, obs: Observations, last: dict[str, float | None]) -> None:
    """One row. ``last``: every session id seen so far on a user-class row, with its latest timestamp (None before
    one): a row's session is new when it is not there, and a timestamp's pause is from the one before."""
    cls = _cell(row, lay.klass)
    is_sub = cls is not None and "subagent" in cls.lower()
    x = _count(_cell(row, lay.prompt), where)
    out = _number(_cell(row, lay.output), f"{where}, output")
    cached = _number(_cell(row, lay.cached), f"{where}, cached")
    think = _number(_cell(row, lay.think), f"{where}, think time")
    stamp = _csv_time(_cell(row, lay.time), f"{where}, time") if lay.session is not None else None
    _check_cached(cached, x, where)
    if obs.refuses(x):
        return
    obs.request(x, out, subagent=is_sub)
    session = _cell(row, lay.session)
    if cached is not None and not is_sub:
        _observe_cached(obs, cached, x)
        if lay.session is not None:  # a row without a session id is a session of its own
            obs.opens.append(not session or session not in last)
    if think is not None and not is_sub:
        obs.gaps_s.append(think)
    if session is not None and not is_sub:
        before = last.get(session)
        if stamp is not None and before is not None:
            obs.gaps_s.append(max(0.0, stamp - before))
        last[session] = stamp if stamp is not None else before


def _read_csv(lines: Iterable[str], path: str, column: str | None, max_prompt_tokens: float | None = None) -> Observations:
    reader = csv.reader(lines)
    try:
        header = next(reader)
    except StopIteration:
        raise BadInput(f"{path}: the file is empty") from None
    except csv.Error as exc:
        raise BadInput(f"{path}: not a readable CSV file: {exc}") from None
    names = [h.strip() for h in header]
    lay = _CsvLayout(_csv_column(names, column, path), _find(names, OUTPUT_COLUMNS), _find(names, CACHED_COLUMNS),
                     _find(names, THINK_COLUMNS), _find(names, SESSION_COLUMNS), _find(names, TIME_COLUMNS),
                     _find(names, CLASS_COLUMNS))
    obs = Observations(path, "csv", f"column {names[lay.prompt]!r}", max_prompt_tokens=max_prompt_tokens)
    obs.output_field = f"column {names[lay.output]!r}" if lay.output is not None else ""
    obs.think_field = (f"column {names[lay.think]!r}" if lay.think is not None else
                       f"gaps between {names[lay.time]!r} within {names[lay.session]!r}"
                       if lay.session is not None and lay.time is not None else "")
    obs.labels_field = f"column {names[lay.klass]!r}" if lay.klass is not None else ""
    last: dict[str, float | None] = {}
    try:
        for line_no, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            obs.records += 1
            try:
                _read_csv_row(row, lay, f"line {line_no}", obs, last)
            except _BadRow as bad:
                obs.skip(str(bad))
    except csv.Error as exc:
        raise BadInput(f"{path}: not a readable CSV file: {exc}") from None
    return obs


# --------------------------------------------------------------------------------------------
# JSON records: one reader per format, the format chosen from the first record
# --------------------------------------------------------------------------------------------

def _keep_leading_ids(match: re.Match) -> str:
    """hash_ids lists are most of a trace's bytes; only the leading ids are needed (prefixes)."""
    body = match.group(1)
    parts = body.split(",", HASH_IDS_KEPT)
    return '"hash_ids":[' + ",".join(parts[:HASH_IDS_KEPT]) + "]"


def _jsonl_records(lines: Iterable[str], obs_skip: Callable[[str], None]) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) of each JSONL line; a line that is not JSON (a truncated last line, a stray
    log line) is skipped and counted."""
    cap = formats.MAX_LINE_CHARS
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if len(line) > cap:
            obs_skip(f"line {line_no}: {len(line):,} characters, over the {cap:,} servesize reads in one line")
            continue
        if '"hash_ids"' in line:
            line = _HASH_IDS.sub(_keep_leading_ids, line)
        try:
            record = parse_json(line, f"line {line_no}")
        except BadInput as exc:
            obs_skip(str(exc))
            continue
        yield line_no, record


# Adds one record's counts to the observations; the str says where the record is, for messages.
_RecordReader = Callable[[dict, str, Observations], None]


@frozen
class _JsonFormat:
    format: str  # Observations.format
    field: str  # what is read, in words (Observations.field)
    read: _RecordReader
    output_field: str = ""
    finish: Callable[[Observations], None] | None = None


def _check_cached(cached_tokens: float | None, prompt_tokens: float, where: str) -> None:
    """A request cannot find more of its prompt cached than its prompt holds: such a row is skipped and
    counted (its reason quoted), never averaged into a hit rate over 100%."""
    if cached_tokens is not None and cached_tokens > prompt_tokens:
        raise _BadRow(f"{where}: {cached_tokens:,.0f} cached tokens exceed the {prompt_tokens:,.0f} prompt tokens")


def _observe_cached(obs: Observations, cached_tokens: float, prompt_tokens: float) -> None:
    """A record that reports its prefix-cache hits counts towards the observed hit rate."""
    obs.cached_tokens += cached_tokens
    obs.cached_prompt_tokens += prompt_tokens
    obs.cached_hits.append(cached_tokens)
    obs.cached_prompts.append(prompt_tokens)


def _field_reader(field_path: str) -> _RecordReader:
    """One token count per record, at a (dotted) field path."""
    def read(rec: dict, loc: str, obs: Observations) -> None:
        obs.user.append(_count(dotted(rec, field_path), f"{loc}, field {field_path!r}"))
    return read


def _read_openai(rec: dict, loc: str, obs: Observations) -> None:
    """usage.prompt_tokens, completion_tokens and prompt_tokens_details.cached_tokens where the record reports them."""
    u = usage(rec) or {}
    x = _count(u.get("prompt_tokens"), f"{loc}, usage.prompt_tokens")
    out = _number(u.get("completion_tokens"), f"{loc}, usage.completion_tokens")
    cached = _number(dotted(u, "prompt_tokens_details.cached_tokens"), f"{loc}, usage.prompt_tokens_details.cached_tokens")
    _check_cached(cached, x, loc)
    if obs.refuses(x):
        return
    obs.request(x, out)
    if cached is not None:
        _observe_cached(obs, cached, x)


def _read_anthropic(rec: dict, loc: str, obs: Observations) -> None:
    """The prompt is input + cache read + cache creation tokens; the cache reads are its prefix-cache hits."""
    u = usage(rec) or {}
    fresh, cache_read, cache_creation, out = (
        _number(u.get(k), f"{loc}, usage.{k}")
        for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens", "output_tokens"))
    if fresh is None:
        raise _BadRow(f"{loc}, usage.input_tokens: empty")
    total = _count(sum(p for p in (fresh, cache_read, cache_creation) if p is not None), f"{loc}, usage")
    if obs.refuses(total):
        return
    obs.request(total, out)
    if cache_read is not None:
        _observe_cached(obs, cache_read, total)


def _prefix_tokens(obj: dict, where: str) -> float:
    """system_tokens + tool_tokens (formats.PREFIX_FIELDS): the prefix a session (or a subagent) sends with every
    request; an unreadable one makes the row bad."""
    return formats.prefix_tokens(obj, lambda value, name: _number(value, f"{where}{name}"))


def _read_subagent_request(q: Any, where: str, obs: Observations) -> None:
    """A request inside a subagent (at any depth): a subagent-class request."""
    if not isinstance(q, dict):
        raise _BadRow(f"{where}: not an object")
    x = _count(q.get("in"), f"{where}.in")
    if obs.refuses(x):
        return
    obs.request(x, _number(q.get("out"), f"{where}.out"), subagent=True)


@dataclass
class _SessionCache:
    """Which of one session's requests find a cached prefix of their own (hash ids unique within it)."""

    prefix_blocks: int
    seen: set = dataclass_field(default_factory=set)

    def cold(self, ids: list) -> bool:
        """Cold: the first block past the shared prefix is in no earlier request of the session."""
        if not ids:
            return True
        probe = ids[min(self.prefix_blocks, len(ids) - 1)]
        warm = probe in self.seen
        self.seen.update(ids)
        return not warm


def _hash_ids(value, where: str) -> list | None:
    """A request's hash ids: absent, or a list of ids (numbers or strings); anything else is a bad row."""
    if value is None:
        return None
    # the element types as a set, built at C speed (a trace holds ~10^8 ids); bool, an int subclass, is its own type
    if not isinstance(value, list) or not set(map(type, value)) <= _ID_TYPES:
        raise _BadRow(f"{where}.hash_ids: not a list of block ids")
    return value


def _read_claude_request(r: dict, where: str, obs: Observations, state: dict) -> None:
    x = _count(r.get("in"), f"{where}.in")
    out = _number(r.get("out"), f"{where}.out")
    t = _number(r.get("t"), f"{where}.t")
    ids = _hash_ids(r.get("hash_ids"), where)
    if obs.refuses(x):  # vLLM refuses it: the session's next pause runs from the request before
        return
    obs.request(x, out)
    if t is not None:  # the pause: from the previous request's end (t + api_time) to this request
        if state.get("t") is not None:
            obs.gaps_s.append(max(0.0, t - state["t"]))
        served = _number(r.get("api_time"), f"{where}.api_time")
        state["t"] = t + (served if served is not None and served > 0 else 0.0)
    cold = None
    if ids is not None and state.get("cache") is not None:
        cold = state["cache"].cold(ids)
        obs.cold.append(cold)
        obs.opens.append(state.get("in") is None)  # the session's first request
    if state.get("in") is not None and x > state["in"] and not cold:
        obs.turn_growth.append(x - state["in"])  # a warm request's new tail (a cold one re-prefills it all)
    state["in"] = x


def _read_claude_code(rec: dict, loc: str, obs: Observations) -> None:
    """One session: its prefix, every top-level request as a user-class request, subagents apart."""
    reqs = rec.get("requests")
    if not isinstance(reqs, list):
        raise _BadRow(f"{loc}: no 'requests' list (Claude Code session format)")
    prefix = _prefix_tokens(rec, f"{loc}, ")
    if prefix > 0:
        obs.prefix_tokens.append(prefix)
    block = _number(rec.get("block_size"), f"{loc}, block_size") or 0
    state: dict = {"cache": _SessionCache(int(prefix // block)) if block else None}
    if block and not obs.cold_basis:
        obs.cold_basis = (f"hash_ids ({block:g} tokens each, unique within a session): a request is cold when its first "
                          "block past the session's system + tool prefix is in no earlier request of the session")
    for e in formats.claude_entries(reqs, loc):
        try:
            if e.opens_subagent:  # its own prefix; its requests follow
                sub_prefix = _prefix_tokens(e.entry, f"{e.where}.")
                if sub_prefix > 0:
                    obs.subagent_prefix_tokens.append(sub_prefix)
            elif e.path:
                _read_subagent_request(e.entry, e.where, obs)
            elif not isinstance(e.entry, dict):
                raise _BadRow(f"{e.where}: not an object")
            else:
                _read_claude_request(e.entry, e.where, obs, state)
        except _BadRow as bad:
            obs.skip(str(bad))


def _read_mooncake(rec: dict, loc: str, obs: Observations) -> None:
    x = _count(rec.get("input_length"), f"{loc}, input_length")
    out = _number(rec.get("output_length"), f"{loc}, output_length")
    ids = _hash_ids(rec.get("hash_ids"), loc)
    if obs.refuses(x):
        return
    obs.request(x, out)
    if ids is not None:
        obs.id_lists.append(ids[:64])


def shared_leading_blocks(id_lists: list[list]) -> int:
    """The largest k such that more than half of the requests start with the same k ids."""
    n, k = len(id_lists), 0
    while n:
        heads = Counter(tuple(ids[:k + 1]) for ids in id_lists if len(ids) > k)
        if not heads or 2 * heads.most_common(1)[0][1] <= n:
            return k
        k += 1
    return k


def _finish_mooncake(obs: Observations) -> None:
    """Global hash ids: the shared prefix is the leading blocks more than half the requests share; a request is cold
    when its first block past that prefix was never seen before (an infinite cache)."""
    id_lists = obs.id_lists
    if not id_lists:
        return
    k = shared_leading_blocks(id_lists)
    obs.hash_prefix_tokens = float(k * MOONCAKE_BLOCK_TOKENS)
    seen: set = set()
    for ids in id_lists:
        probe = ids[min(k, len(ids) - 1)] if ids else None
        obs.cold.append(probe not in seen)
        seen.update(ids)
    obs.cold_basis = (f"hash_ids ({MOONCAKE_BLOCK_TOKENS} tokens each, global): {k} leading block(s) are shared by more "
                      "than half the requests (the shared prefix); a request is cold when its first block past "
                      "them was never seen before (an infinite cache)")


def _field_format(field_path: str) -> _JsonFormat:
    """A token count at a named field: --column (a dotted path), or one of the usual names."""
    return _JsonFormat("jsonl", f"field {field_path!r}", _field_reader(field_path))


# How each format formats.detect recognises is read here.
_READERS: dict[str, _JsonFormat] = {
    "claude-code": _JsonFormat("claude-code", "requests[].in (input tokens per request)", _read_claude_code,
                               "requests[].out"),
    "openai": _JsonFormat("openai", "usage.prompt_tokens", _read_openai, "usage.completion_tokens"),
    "anthropic": _JsonFormat("anthropic", "usage input + cache read + cache creation tokens", _read_anthropic,
                             "usage.output_tokens"),
    "mooncake": _JsonFormat("mooncake", "input_length", _read_mooncake, "output_length", _finish_mooncake),
}


def _detect(rec: dict, column: str | None) -> _JsonFormat | None:
    """The format of a file, from its first record: --column if given, else the first format the record matches,
    else the first of the usual names among its fields."""
    if column is not None:
        return _field_format(column)
    name = formats.detect(rec)
    if name == "measure":
        raise BadInput("a servesize measure run record holds no request log: `servesize simulate` replays it")
    if name is not None:
        return _READERS[name]
    flat_key = next((c for c in CSV_COLUMNS if c in rec), None)
    return _field_format(flat_key) if flat_key is not None else None


def _first_format(rec: Any, loc: str, path: str, column: str | None) -> _JsonFormat:
    """The format the first readable record shows; a file that starts with anything else is refused."""
    if not isinstance(rec, dict):
        raise BadInput(f"{path} {loc}: expected a JSON object, got {type(rec).__name__}")
    fmt = _detect(rec, column)
    if fmt is None:
        raise BadInput(f"{path} {loc}: no token count recognised (usage.prompt_tokens, requests[].in, "
                       "input_length, prompt_tokens, ...); name the field with --column")
    return fmt


def _read_json_records(records: Callable[[Callable[[str], None]], Iterator[tuple[int, Any]]], path: str,
                       column: str | None, max_prompt_tokens: float | None = None) -> Observations:
    """JSONL or a JSON array of objects, every record read in the format the first readable one shows."""
    found: tuple[_JsonFormat, Observations] | None = None
    early_skips: list[str] = []

    def skip(why: str) -> None:
        if found is None:
            early_skips.append(why)
        else:
            found[1].skip(why)

    for where, rec in records(skip):
        loc = f"record {where}"
        if found is None:
            fmt = _first_format(rec, loc, path, column)
            found = fmt, Observations(path, fmt.format, fmt.field, output_field=fmt.output_field,
                                      max_prompt_tokens=max_prompt_tokens)
            for why in early_skips:
                found[1].skip(why)
        fmt, obs = found
        obs.records += 1
        try:
            if not isinstance(rec, dict):
                raise _BadRow(f"{loc}: not a JSON object")
            fmt.read(rec, loc, obs)
        except _BadRow as bad:
            obs.skip(str(bad))
    if found is None:
        raise BadInput(f"{path}: the file holds no records" + (f" ({early_skips[0]})" if early_skips else ""))
    fmt, obs = found
    if fmt.finish is not None:
        fmt.finish(obs)
    if fmt.format == "claude-code":
        obs.think_field = "pauses from a request's end (t + api_time) to its session's next requests[].t"
        obs.labels_field = "type: subagent entries"
    return obs


def read_token_counts(path, column: str | None = None, max_prompt_tokens: float | None = None) -> Observations:
    """What a CSV, JSONL or JSON request log (gzip allowed) says about its requests, format auto-detected; every
    kind of file is streamed (formats.text_lines, formats.json_array): memory follows the records, not the file.
    ``max_prompt_tokens``: a deployment's max_model_len; longer prompts are left out as vLLM refuses them."""
    p = pathlib.Path(path)
    first = first_char(p)
    if not first:
        raise BadInput(f"{str(p)!r}: the file is empty")
    if first == "{":
        return _read_json_records(lambda skip: _jsonl_records(text_lines(p), skip), str(p), column, max_prompt_tokens)
    if first == "[":
        return _read_json_records(lambda skip: json_array(p), str(p), column, max_prompt_tokens)
    return _read_csv(text_lines(p), str(p), column, max_prompt_tokens)
