"""The caps on what an input may make servesize do, in one place, and the readers that enforce them.

Every file servesize reads (config.json, request logs, workload and calibration files, vLLM logs) goes
through ``read_input``, or ``input_lines`` for a vLLM log read as it is parsed: only a regular file (a FIFO,
a device or a directory is refused before it is opened, so nothing blocks), at most its kind's size on disk, gzip decompressed to at most
``MAX_DECOMPRESSED_BYTES`` (a gzip bomb stops there), and JSON through ``parse_json``: nested at most
``MAX_JSON_DEPTH`` deep. docs/ENGINEERING.md ("Limits")
lists these caps beside the others (Monte-Carlo sizes, measure's records), and a test keeps the list
whole. Each cap sits far past any real input: the figure beside it says what the largest real one is.
"""

from __future__ import annotations

import io
import json
import math
import os
import stat
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from servesize.errors import MAX_ECHO_CHARS as _ECHO_CHARS  # not a limit of this module: the table lists MAX_*
from servesize.errors import BadInput, clip

# -- files -------------------------------------------------------------------------------------------
MAX_CONFIG_BYTES = 16 << 20          # a config.json: the largest in tests/fixtures is 88,567 bytes (an NVFP4 module list)
MAX_LOG_BYTES = 256 << 20            # a vLLM start-up log: a few KB to a few MB with debug lines
MAX_INPUT_BYTES = 2 << 30            # a request log or trace on disk (the 460 MB Claude Code trace is 31 MB gzipped)
MAX_DECOMPRESSED_BYTES = 1 << 30     # what a gzip file may expand to (the 460 MB Claude Code trace fits): a gzip bomb stops here
MAX_SMALL_FILE_BYTES = 64 << 20      # a workload or calibration file servesize wrote (a few KB)
MAX_LINE_CHARS = 256 << 20           # one line of a request log: the largest Claude Code session line is ~3 MB
MAX_LOG_LINE_CHARS = 1 << 20         # one vLLM log line is scanned up to here (a config line is a few KB)
MAX_LOG_NUMBER = 10**15              # any count or GiB figure in a vLLM log or a calibration file (a pool is ~1e7 tokens)
MAX_JSON_DEPTH = 64                  # nesting of any JSON servesize reads: the fixture configs nest 5 deep at most

# -- model geometry ----------------------------------------------------------------------------------
MAX_LAYERS = 4096                    # num_hidden_layers: the deepest real model is ~126 layers (Llama 3.1 405B)
MAX_CONFIG_INT = 10**12              # any other config.json count (vocab, widths, experts, positions)

# -- hardware ----------------------------------------------------------------------------------------
# --cpu-offload-gib: one engine's host RAM. The largest single system sold holds 48 TB (HPE Superdome Flex, 32 sockets:
# https://www.hpe.com/us/en/servers/superdome.html); 64 TiB is past it, so a larger figure is a typo, not a machine.
MAX_HOST_MEMORY_GIB = 65536

# -- Monte-Carlo -------------------------------------------------------------------------------------
MAX_FILLS = 100_000                  # --fills: the default is DEFAULT_FILLS
MAX_DRAWS = 1 << 20                  # --draws (and the most a fill grows them to): the default is DEFAULT_DRAWS
# The Monte-Carlo's defaults, named once: the Scenario's --fills/--draws/--seed declare them as inputs, the
# planner's Knobs and the warm fill take them as they are.
DEFAULT_FILLS = 1500                 # fills of the pool a plan runs (the warm-capacity seed's resolution)
DEFAULT_DRAWS = 2000                 # sessions drawn per fill before a fill needs more
DEFAULT_SEED = 0                     # the same inputs give the same output

# -- the engine simulator ----------------------------------------------------------------------------
MAX_ENGINE_STEPS = 50_000_000        # steps of one engine run: 1,000 generated coding sessions take ~2M (jumps count each step)
MAX_ENGINE_USERS = 4096              # users the engine simulator's search goes up to (one H200 serves tens to hundreds)
MAX_ENGINE_REQUESTS = 200_000        # requests of one engine run: ~1 ms of CPU each here (a 20,000-request Mooncake trace:
                                     # 13 runs of a search in 233 s), so a run this large takes minutes, a search ten


# Set while a request of the explorer is computed: why no file a request names may be touched. Every reader
# (read_input, require_regular, model/catalogue.resolve_model) refuses before any stat or open while it is set.
_NO_FILES: ContextVar[str | None] = ContextVar("servesize_no_files", default=None)


@contextmanager
def files_forbidden(why: str) -> Iterator[None]:
    """Within this block, a path given to a reader is refused with ``why`` before the file system is asked."""
    token = _NO_FILES.set(why)
    try:
        yield
    finally:
        _NO_FILES.reset(token)


def check_may_read(name: str, what: str) -> None:
    """Refuse ``name`` when files are forbidden here (the explorer), without touching it."""
    why = _NO_FILES.get()
    if why is not None:
        raise BadInput(f"{what} {_shown(str(name))[:80]!r}: {why}")


def _regular_within(path: str | os.PathLike, what: str, max_bytes: int) -> str:
    """The name a message shows for the regular file at ``path``, once it is at most ``max_bytes`` on disk."""
    info = require_regular(path, what)
    name = _shown(os.fspath(path))
    if info.st_size > max_bytes:
        raise BadInput(f"{what} {name}: {info.st_size:,} bytes, over the {max_bytes:,} servesize reads")
    return name


def read_input(path: str | os.PathLike, what: str, max_bytes: int = MAX_INPUT_BYTES, *,
               gunzip: bool = False) -> bytes:
    """The bytes of the regular file at ``path``, at most ``max_bytes`` (and decompressed when it is gzip
    and ``gunzip``), or one line naming ``what`` and the reason."""
    name = _regular_within(path, what, max_bytes)
    try:
        with open(path, "rb") as fh:
            raw = read_at_most(fh, max_bytes)
    except OSError as exc:
        raise BadInput(f"{what} {name}: cannot read it ({exc.strerror or exc})") from None
    if len(raw) > max_bytes:  # grew while we read it
        raise BadInput(f"{what} {name}: over the {max_bytes:,} bytes servesize reads")
    if gunzip and raw[:2] == b"\x1f\x8b":
        return gunzip_bounded(raw, f"{what} {name}")
    return raw


def input_lines(path: str | os.PathLike, what: str, max_bytes: int = MAX_INPUT_BYTES, *, gunzip: bool = False,
                max_line_chars: int = MAX_LOG_LINE_CHARS) -> Iterator[str]:
    """The lines of the regular file at ``path`` as ``read_input`` would give its text (split at '\\n' only,
    UTF-8 with bad bytes replaced, gzip decompressed when ``gunzip``), read in blocks as they are used: the file is
    never held whole. Each line is cut at ``max_line_chars`` (a line longer than a block is read past, never
    kept); the file is at most ``max_bytes`` on disk and, decompressed, at most ``MAX_DECOMPRESSED_BYTES``. Any of
    these, or a file that cannot be read, is one line naming ``what``. (A block is split at its last newline before
    it is decoded: no UTF-8 sequence contains that byte, so the text is the whole file's, line for line.)"""
    name = _regular_within(path, what, max_bytes)
    longest = 4 * max_line_chars  # bytes: a line cut at max_line_chars characters needs no more of its bytes
    packed = False
    try:
        with open(path, "rb") as raw:
            packed = gunzip and raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            fh = _gunzip(raw) if packed else raw
            cap = MAX_DECOMPRESSED_BYTES if packed else max_bytes
            size, carry, skipping = 0, b"", False
            while block := fh.read(_CHUNK):
                size += len(block)
                if size > cap:
                    grown = "decompresses to more than" if packed else "grew while it was read, past"
                    raise BadInput(f"{what} {name} {grown} {cap:,} bytes (the cap servesize reads)")
                if skipping:  # the rest of a line already cut
                    end = block.find(b"\n")
                    if end < 0:
                        continue
                    block, skipping = block[end + 1:], False
                data = carry + block
                last = data.rfind(b"\n")
                if last >= 0:
                    lines = data[:last].decode("utf-8", errors="replace").split("\n")
                    if max(map(len, lines)) > max_line_chars:
                        lines = [x[:max_line_chars] for x in lines]
                    yield from lines
                    data = data[last + 1:]
                if len(data) > longest:
                    yield data[:longest].decode("utf-8", errors="replace")[:max_line_chars]
                    data, skipping = b"", True
                carry = data
            if carry:
                yield carry.decode("utf-8", errors="replace")[:max_line_chars]
    except (OSError, EOFError, zlib.error) as exc:
        if packed:
            raise BadInput(f"{what} {name} looks gzip-compressed but cannot be decompressed: {exc}") from None
        raise BadInput(f"{what} {name}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None


_CHUNK = 4 << 20


def shown_name(name: str) -> str:
    """A file name as a message shows it: a name past 200 characters is cut (the message stays one short line)."""
    return name if len(name) <= 200 else name[:197] + "..."


_shown = shown_name


def read_at_most(fh, max_bytes: int) -> bytes:
    """Up to ``max_bytes + 1`` bytes of ``fh``, read in chunks (``read(n)`` would allocate all n at once)."""
    parts, size = [], 0
    while size <= max_bytes:
        chunk = fh.read(min(_CHUNK, max_bytes + 1 - size))
        if not chunk:
            break
        parts.append(chunk)
        size += len(chunk)
    return b"".join(parts)


def require_regular(path: str | os.PathLike, what: str) -> os.stat_result:
    """The stat of the regular file at ``path``; a directory, FIFO, socket or device is refused before
    anything opens it (opening a FIFO blocks until a writer comes)."""
    full = os.fspath(path)
    name = _shown(full)
    check_may_read(full, what)
    try:
        info = os.stat(full)
    except FileNotFoundError:
        raise BadInput(f"{what} {name}: cannot read it (no such file)") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        raise BadInput(f"{what} {name!r}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    if stat.S_ISDIR(info.st_mode):
        raise BadInput(f"{what} {name}: is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise BadInput(f"{what} {name}: not a regular file (a pipe, socket or device); save it to a file first")
    return info


def _gunzip(raw: Any) -> Any:
    """A gzip reader over the binary file ``raw`` (gzip is imported here: most commands never read a gzip file)."""
    import gzip

    return gzip.GzipFile(fileobj=raw)


def gunzip_bounded(raw: bytes, what: str, max_bytes: int | None = None) -> bytes:
    """``raw`` gzip-decompressed, refused once it would pass ``max_bytes`` (``MAX_DECOMPRESSED_BYTES``)."""
    max_bytes = MAX_DECOMPRESSED_BYTES if max_bytes is None else max_bytes
    try:
        with _gunzip(io.BytesIO(raw)) as fh:
            out = read_at_most(fh, max_bytes)
    except (OSError, EOFError, zlib.error) as exc:
        raise BadInput(f"{what} looks gzip-compressed but cannot be decompressed: {exc}") from None
    if len(out) > max_bytes:
        raise BadInput(f"{what} decompresses to more than {max_bytes:,} bytes (the cap on a decompressed file)")
    return out


def parse_json(text: str | bytes, what: str, *, walk: bool = True) -> Any:
    """JSON text as Python, nested at most ``MAX_JSON_DEPTH`` deep, else one line naming ``what``.

    An integer longer than Python's ``sys.get_int_max_str_digits()`` (4,300) is refused here; a long one
    under it (400 digits) is read, and each caller's number check refuses it (it overflows a float). NaN
    and Infinity spellings are read as Python reads them: callers check their values are finite.
    ``walk=False`` (a trace's hot path, whose readers never recurse) keeps only the decoder's own limit
    (a RecursionError past ~1,000 levels, refused here)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{what} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise BadInput(f"{what}: JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:  # an integer past the interpreter's digit limit, bytes that are not UTF-8
        raise BadInput(f"{what}: {str(exc)[:120]}") from None
    if walk:
        check_depth(data, what)
    return data


def check_depth(data: Any, what: str, limit: int = MAX_JSON_DEPTH) -> None:
    """Refuse a list/dict structure nested deeper than ``limit`` (iteratively: no recursion to exhaust)."""
    stack = [(data, 1)] if isinstance(data, (dict, list)) else []
    while stack:
        obj, depth = stack.pop()
        if depth > limit:
            raise BadInput(f"{what}: JSON nested deeper than {limit} levels")
        children = obj.values() if isinstance(obj, dict) else obj
        # the children's types first, at C speed: a trace's long lists of numbers hold no container to descend into
        if any(issubclass(kind, (dict, list)) for kind in set(map(type, children))):
            stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


# -- numbers inside files and sizes that follow from a file ------------------------------------------
MAX_FILE_NUMBER = 10**15             # any number in a workload file (a pool is ~1e7 tokens, a byte figure ~1e11)
MAX_REQUEST_TOKENS = 10**8           # one request's prompt or output in a trace (the longest context any model takes is 10M)
MAX_TRACE_BLOCKS = 1 << 28           # block ids a trace may hold (the Claude Code trace has 94M; 8 bytes each)
MAX_REPLAY_BLOCKS = 1 << 29  # blocks a replay sends, or allocates with outputs (~16 B each at peak: ~8.6 GiB; Claude Code at 16: 375M)
#                                      the Claude Code trace in its own 64-token blocks sends 94M
MAX_REPLAY_SESSIONS = 1 << 20        # sessions one replay draws (--users x --sessions-per-user; the default at 100,000 users is 400,000)
MAX_REPLAY_USERS = 100_000           # --users of a replay: each user is a row of the replay's arrays
MAX_SYNTHETIC_SESSIONS = 100_000     # sessions generated from a workload file (--sessions): 1,600 requests' worth by default


def field_path(path: tuple) -> str:
    """``("user", "sigma")`` -> ``user.sigma``; a list index as ``[2]``; a key that is not a plain name (a newline, a
    dot, 5,000 characters: a file may hold any) as its clipped repr in brackets, so the line stays one line."""
    out = ""
    for key in path:
        if isinstance(key, int):
            out += f"[{key}]"
        elif key and len(key) <= _ECHO_CHARS and all(c.isascii() and (c.isalnum() or c in "_-") for c in key):
            out += f".{key}" if out else key
        else:
            out += f"[{clip(key)}]"
    return out or "the top level"


def check_numbers(data: Any, what: str, limit: float = MAX_FILE_NUMBER) -> None:
    """Refuse, naming the field, any number at any depth of ``data`` that is not finite or lies past
    ``limit`` either way (an integer past a float's range would overflow where it is used).
    Iterative, so a deep structure exhausts nothing."""
    stack: list[tuple[Any, tuple]] = [(data, ())]
    while stack:
        obj, path = stack.pop()
        if isinstance(obj, dict):
            stack.extend((v, (*path, str(k))) for k, v in obj.items())
        elif isinstance(obj, list):
            stack.extend((v, (*path, i)) for i, v in enumerate(obj))
        elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
            if isinstance(obj, float) and not math.isfinite(obj):
                raise BadInput(f"{what}: {field_path(path)} = {obj!r} is not a finite number")
            if abs(obj) > limit:
                raise BadInput(f"{what}: {field_path(path)} = {shown_number(obj)} is out of range "
                               f"(at most {limit:.0e} either way)")


def shown_number(value: int | float) -> str:
    """A number as a message shows it: a long integer cut to its first digits and its length."""
    if isinstance(value, int):
        text = str(value) if abs(value) < 10**30 else None
        if text is None:
            digits = len(str(abs(value))) if abs(value) < 10**4000 else "4,000+"
            text = f"{str(value)[:12]}... ({digits} digits)"
        return text
    return f"{value:g}"


# -- output paths ------------------------------------------------------------------------------------
PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def check_output(path: str | os.PathLike, what: str, *, suffixes: tuple[str, ...] | None = None,
                 inputs: tuple = ()) -> str:
    """An output path checked before any work starts, or one line saying why not: its format from its
    extension (one of ``suffixes``), a regular file or a new one in a writable folder (not a directory,
    device, FIFO or socket), and never one of ``inputs`` (the command's own input files)."""
    full = os.fspath(path)
    name = _shown(full)
    if not full or "\x00" in full:
        raise BadInput(f"{what} {name!r}: not a file name")
    if full.endswith(os.sep) or os.path.isdir(full):
        raise BadInput(f"{what} {name}: is a directory; name the file to write")
    try:
        info = os.stat(full)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise BadInput(f"{what} {name}: cannot write it ({exc.strerror or exc})") from None
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise BadInput(f"{what} {name}: not a regular file (a device, pipe or socket); name a file to write")
    if suffixes is not None and os.path.splitext(full)[1].lower() not in suffixes:
        raise BadInput(f"{what} {name}: the format comes from the extension; use one of {', '.join(suffixes)}")
    for given in inputs:
        if given is not None and _same_file(full, os.fspath(given)):
            raise BadInput(f"{what} {name}: is the input file itself; writing it would destroy the input")
    folder = os.path.dirname(os.path.abspath(full))
    if info is None and not os.path.isdir(folder):
        raise BadInput(f"{what} {name}: its folder {_shown(folder)} does not exist")
    if not os.access(full if info is not None else folder, os.W_OK):
        raise BadInput(f"{what} {name}: cannot write it (permission denied)")
    return full


def check_output_dir(path: str | os.PathLike, what: str) -> str:
    """An output folder checked before any work starts, or one line saying why not: an existing, writable
    directory, or a new one whose nearest existing parent is a writable directory (it is created later);
    never a file, device, FIFO or socket."""
    full = os.fspath(path)
    name = _shown(full)
    if not full or "\x00" in full:
        raise BadInput(f"{what} {name!r}: not a folder name")
    if os.path.isdir(full):
        if not os.access(full, os.W_OK | os.X_OK):
            raise BadInput(f"{what} {name}: cannot write in it (permission denied)")
        return full
    if os.path.lexists(full):
        raise BadInput(f"{what} {name}: exists and is not a directory; name a folder to write the records in")
    parent = os.path.dirname(os.path.abspath(full.rstrip(os.sep) or full))
    while not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise BadInput(f"{what} {name}: {_shown(parent)} is not a directory, so the folder cannot be created")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise BadInput(f"{what} {name}: cannot create it in {_shown(parent)} (permission denied)")
    return full


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return os.path.realpath(a) == os.path.realpath(b)


def write_output(path: str | os.PathLike, data: bytes | str, what: str) -> None:
    """Write ``data`` to ``path`` whole, or one line (a full disk, a vanished folder); a partial file is removed."""
    raw = data.encode() if isinstance(data, str) else data
    full = os.fspath(path)
    try:
        with open(full, "wb") as fh:
            fh.write(raw)
    except OSError as exc:
        _remove_partial(full)
        raise BadInput(f"{what} {_shown(full)}: cannot write it ({exc.strerror or exc})") from None


def _remove_partial(full: str) -> None:
    try:
        if os.path.isfile(full):
            os.remove(full)
    except OSError:
        pass
