"""The request-log and trace formats servesize reads, in one place: which format a file is, the fields each
names, and the bounded streams both readers take their records from.

Two readers use this module: ``workload.readers`` (what a log says about the workload: ``workload fit``) and
``simulate.traces`` (every request with its prefix blocks: ``simulate``). Each reads the records its own way;
what a format *is* is decided here, once:

- ``measure``: a servesize ``measure`` run record (its first line ``{"type": "header", "kind": ...}``);
- ``claude-code``: Claude Code sessions (WEKA's kv-cache-tester traces), one session a line, ``requests[]``
  holding ``in``/``out``/``t``/``hash_ids``;
- ``openai``: OpenAI-style usage records (``usage.prompt_tokens``, also under ``response`` or ``response.body``);
- ``anthropic``: Anthropic-style usage (``usage.input_tokens`` + cache reads + cache creation);
- ``mooncake``: Mooncake FAST'25 traces and other one-request-a-line hash traces (``input_length``,
  ``output_length``, ``hash_ids``, ``MOONCAKE_BLOCK_TOKENS`` tokens per id unless the record says).

Streams: a file is read only when it is a regular file under ``MAX_INPUT_BYTES``; gzip is detected from the
magic bytes and stops at ``limits.MAX_DECOMPRESSED_BYTES`` as it is read (a gzip bomb never expands past the
cap); JSONL and CSV come line by line (at most ``MAX_LINE_CHARS`` of one line held), a JSON array one element
at a time (at most ``MAX_LINE_CHARS`` for one element): memory is bounded per record, never by the file.
"""

from __future__ import annotations

import gzip
import io
import json
import pathlib
import zlib
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import servesize.limits as limits
from servesize.errors import BadInput
from servesize.limits import MAX_INPUT_BYTES, MAX_JSON_DEPTH, check_depth, require_regular

# Mooncake FAST'25 traces: 512 tokens per hash id (kvcache-ai/Mooncake, FAST25-release/README.md:
# https://github.com/kvcache-ai/Mooncake/blob/main/FAST25-release/README.md)
MOONCAKE_BLOCK_TOKENS = 512

FORMATS = ("measure", "claude-code", "openai", "anthropic", "mooncake")
REPLAYABLE = ("claude-code", "mooncake", "openai", "measure")  # formats whose requests simulate can replay

USAGE_PATHS = ("usage", "response.usage", "response.body.usage", "body.usage")
SESSION_FIELDS = ("session_id", "metadata.session_id", "conversation_id", "user", "metadata.user_id")
TIME_FIELDS = ("timestamp", "created", "created_at", "request_time")
PREFIX_FIELDS = ("system_tokens", "tool_tokens")  # a Claude Code session's (or subagent's) prefix: their sum

MAX_LINE_CHARS = limits.MAX_LINE_CHARS
_CHUNK = 1 << 20
_MAGIC_GZIP = b"\x1f\x8b"


# -- fields ------------------------------------------------------------------------------------------------

def dotted(obj: Any, path: str) -> Any:
    """The value at a dotted path (``usage.prompt_tokens``), None where any part is missing."""
    for part in path.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def usage(obj: dict) -> dict | None:
    """A record's usage object, wherever the API wrote it (``usage``, ``response.usage``, ...)."""
    for path in USAGE_PATHS:
        u = dotted(obj, path)
        if isinstance(u, dict):
            return u
    return None


def first_field(rec: dict, names: tuple[str, ...]) -> Any:
    """The value of the first of ``names`` (dotted paths) the record has."""
    for name in names:
        value = dotted(rec, name)
        if value is not None:
            return value
    return None


def prefix_tokens(obj: dict, read: Callable[[Any, str], float | None]) -> float:
    """system_tokens + tool_tokens: the prefix a Claude Code session (or subagent) sends with every request;
    ``read(value, field)`` is the caller's number check (None or 0 for an absent field)."""
    return sum(read(obj.get(name), name) or 0.0 for name in PREFIX_FIELDS)


# -- Claude Code sessions (kv-cache-tester traces) -----------------------------------------------------------

def is_subagent(entry: Any) -> bool:
    """A session's ``requests[]`` entry that is a subagent: ``type: "subagent"`` with a ``requests`` list of its
    own, which may hold subagents in turn."""
    return isinstance(entry, dict) and entry.get("type") == "subagent" and isinstance(entry.get("requests"), list)


class ClaudeEntry(NamedTuple):
    """One entry of a Claude Code session, in file order: a request, or a subagent's opening (its requests follow)."""

    entry: Any              # the request (anything: its reader checks it) or the subagent object
    where: str              # "record 3, requests[4].requests[1]": the caller's location, then the entry's path
    path: tuple[int, ...]   # the indices of the subagents around it, outermost first: () for the session's own
    position: int           # its index in its list
    opens_subagent: bool    # a subagent entry: the entries after it with ``path + (position,)`` are its own


def claude_entries(requests: list, where: str, path: tuple[int, ...] = ()) -> Iterator[ClaudeEntry]:
    """Every request and subagent of a session's ``requests`` list, depth first in file order: the one walk the
    workload fitter (workload/readers.py) and the replay (simulate/traces.py) read a session by. Bounded by the
    JSON already parsed (its depth is capped at MAX_JSON_DEPTH)."""
    for j, entry in enumerate(requests):
        here = f"{where}{'.' if path else ', '}requests[{j}]"
        if is_subagent(entry):
            yield ClaudeEntry(entry, here, path, j, True)
            yield from claude_entries(entry["requests"], here, (*path, j))
        else:
            yield ClaudeEntry(entry, here, path, j, False)


# -- detection ---------------------------------------------------------------------------------------------

def _claude_code(rec: dict) -> bool:
    reqs = rec.get("requests")
    return isinstance(reqs, list) and any(isinstance(r, dict) and ("in" in r or "hash_ids" in r) for r in reqs)


def detect(rec: Any) -> str | None:
    """The format a file's first record shows (one of ``FORMATS``), None for none of them."""
    if not isinstance(rec, dict):
        return None
    if rec.get("type") == "header" and "kind" in rec:
        return "measure"
    if _claude_code(rec):
        return "claude-code"
    u = usage(rec) or {}
    if "prompt_tokens" in u:
        return "openai"
    if "input_tokens" in u:
        return "anthropic"
    if "input_length" in rec:
        return "mooncake"
    return None


# -- bounded streams ---------------------------------------------------------------------------------------

class _Counted(io.RawIOBase):
    """A binary stream that refuses past ``limit`` bytes read (a gzip bomb stops at the cap, as it is read)."""

    def __init__(self, fh, limit: int, what: str):
        self.fh, self.limit, self.what, self.count = fh, limit, what, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        data = self.fh.read1(len(buf))  # what one read gives: a gzip cut short yields its lines before the EOFError
        self.count += len(data)
        if self.count > self.limit:
            raise BadInput(f"{self.what} decompresses to more than {self.limit:,} bytes (the cap on a decompressed file)")
        buf[:len(data)] = data
        return len(data)


@contextmanager
def open_binary(path: pathlib.Path, what: str) -> Iterator[io.BufferedReader]:
    """The file's bytes, decompressed when it is gzip, refused past the caps (a regular file only)."""
    info = require_regular(path, what)
    if info.st_size > MAX_INPUT_BYTES:
        raise BadInput(f"{what} {path}: {info.st_size:,} bytes, over the {MAX_INPUT_BYTES:,} servesize reads")
    try:
        raw = open(path, "rb")
    except OSError as exc:
        raise BadInput(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    with raw:
        is_gzip = raw.read(2) == _MAGIC_GZIP
        raw.seek(0)
        fh = gzip.GzipFile(fileobj=raw) if is_gzip else raw
        cap = limits.MAX_DECOMPRESSED_BYTES if is_gzip else MAX_INPUT_BYTES
        yield io.BufferedReader(_Counted(fh, cap, f"{what} {str(path)!r}"), _CHUNK)


def _not_text(path: pathlib.Path) -> BadInput:
    return BadInput(f"{str(path)!r} is not UTF-8 text (CSV, JSONL or JSON, optionally gzip)")


def text_lines(path: pathlib.Path, what: str = "request log") -> Generator[str, None, None]:
    """The lines of a text log (gzip allowed), read as they come: at most ``MAX_LINE_CHARS`` of one line is held
    (the rest of a longer line is passed over); a line over the cap is yielded as its first MAX_LINE_CHARS + 1
    characters, for the reader to skip and count."""
    cap = MAX_LINE_CHARS
    with open_binary(path, what) as fh:
        text = io.TextIOWrapper(fh, encoding="utf-8-sig")
        try:
            while True:
                line = text.readline(cap + 1)
                if not line:
                    return
                if len(line) > cap and not line.endswith("\n"):
                    while (rest := text.readline(_CHUNK)) and not rest.endswith("\n"):
                        pass  # the rest of an overlong line, passed over
                yield line
        except UnicodeDecodeError:
            raise _not_text(path) from None
        except (OSError, EOFError, zlib.error) as exc:
            raise BadInput(f"{what} {str(path)!r} cannot be read or decompressed: {exc}") from None


def first_char(path: pathlib.Path, what: str = "request log") -> str:
    """The first non-blank character of the file (decompressed): ``[`` a JSON array, ``{`` JSONL, else CSV."""
    lines = text_lines(path, what)
    try:
        for line in lines:
            if line.strip():
                return line.lstrip()[:1]
        return ""
    finally:
        lines.close()


def _skip_space(buf: str, pos: int) -> int:
    while pos < len(buf) and buf[pos] in " \t\r\n":
        pos += 1
    return pos


class _ArrayText:
    """The text of a JSON array, read a chunk at a time; ``pending`` is what is held and not yet parsed."""

    def __init__(self, text: io.TextIOBase):
        self.text, self.buf, self.pos, self.eof = text, "", 0, False

    def more(self, at_least: int = 0) -> bool:
        if self.eof:
            return False
        if self.pos > _CHUNK:  # drop what is parsed before reading on
            self.buf, self.pos = self.buf[self.pos:], 0
        chunk = self.text.read(max(at_least, _CHUNK))
        self.eof = not chunk
        self.buf += chunk
        return bool(chunk)

    def next_char(self) -> str:
        """The next character that is not white space (consumed), "" at the end of the file."""
        while True:
            self.pos = _skip_space(self.buf, self.pos)
            if self.pos < len(self.buf):
                self.pos += 1
                return self.buf[self.pos - 1]
            if not self.more():
                return ""


def _element(src: _ArrayText, decoder: json.JSONDecoder, where: str) -> Any:
    """One element of the array, parsed from what is held (reading on while it is cut off: at most
    ``MAX_LINE_CHARS`` of it, each read as large as what is held, so a long element costs a few parses)."""
    while True:
        src.pos = _skip_space(src.buf, src.pos)
        try:
            value, end = decoder.raw_decode(src.buf, src.pos)
            if end < len(src.buf) or src.eof:  # a number or word that ends the held text may go on past it
                src.pos = end
                return value
        except json.JSONDecodeError as exc:
            if src.eof:
                raise BadInput(f"{where} is not valid JSON ({exc.msg})") from None
        except RecursionError:
            raise BadInput(f"{where}: JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
        except ValueError as exc:  # an integer past the interpreter's digit limit
            raise BadInput(f"{where}: {str(exc)[:120]}") from None
        held = len(src.buf) - src.pos
        if held > MAX_LINE_CHARS:
            raise BadInput(f"{where}: one element over the {MAX_LINE_CHARS:,} characters servesize reads in one record")
        src.more(held)


def json_array(path: pathlib.Path, what: str = "request log") -> Iterator[tuple[int, Any]]:
    """(element number from 1, element) of a file holding one JSON array (gzip allowed), one element at a time;
    each element nested at most ``MAX_JSON_DEPTH`` deep. Anything that is not such an array is refused."""
    decoder = json.JSONDecoder()
    name = f"{what} {str(path)!r}"
    with open_binary(path, what) as fh:
        src = _ArrayText(io.TextIOWrapper(fh, encoding="utf-8-sig"))
        try:
            if src.next_char() != "[":
                raise BadInput(f"{name}: expected a JSON array")
            n = 0
            while True:
                src.pos = _skip_space(src.buf, src.pos)
                while src.pos >= len(src.buf) and src.more():
                    src.pos = _skip_space(src.buf, src.pos)
                if n == 0 and src.buf[src.pos:src.pos + 1] == "]":
                    src.pos += 1
                    break
                n += 1
                value = _element(src, decoder, f"{name}, element {n}")
                check_depth([value], f"{name}, element {n}")  # the array is one level of the nesting
                yield n, value
                sep = src.next_char()
                if sep == "]":
                    break
                if sep != ",":
                    raise BadInput(f"{name} is not valid JSON (expected ',' or ']' after element {n})")
            if src.next_char():
                raise BadInput(f"{name} is not valid JSON (text after the array's closing ']')")
        except UnicodeDecodeError:
            raise _not_text(path) from None
        except (OSError, EOFError, zlib.error) as exc:
            raise BadInput(f"{name} cannot be read or decompressed: {exc}") from None
