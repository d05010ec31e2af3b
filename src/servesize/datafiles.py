"""servesize's own data tables (src/servesize/data/*.toml), each read through one function: `table(name)`.

The TOML files are the only source. Python's TOML reader is pure Python, though: the tables `servesize memory`
reads took about 110 ms of its 400 ms of CPU (models.toml alone 54 ms), where the C JSON reader reads the same
tables in about 6 ms. So a table, once parsed, is kept as JSON in the user's cache folder under a checksum of the TOML's
bytes, as Python keeps a module's bytecode beside its source: an edited table has another checksum and is parsed again;
a copy that cannot be written, read or trusted is passed over and the TOML is parsed. A table that JSON cannot hold
exactly (a TOML date, say) is never kept.

Where the copies go: $SERVESIZE_CACHE_DIR, else $XDG_CACHE_HOME/servesize, else ~/.cache/servesize. Set
SERVESIZE_CACHE_DIR to an empty value to keep none.
"""

from __future__ import annotations

import json
import os
import pathlib
import threading
import zlib
from typing import Any

CACHE_ENV = "SERVESIZE_CACHE_DIR"
CACHE_FORMAT = 1  # bump when what a kept copy holds changes
DATA = pathlib.Path(__file__).resolve().parent / "data"


def cache_dir() -> pathlib.Path | None:
    """The folder kept copies go in, or None when the user asked for none."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen is not None:
        return pathlib.Path(chosen) if chosen else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "servesize"


def table(name: str) -> dict[str, Any]:
    """The parsed table of data/<name> (a TOML file of the package), a new dict on every call."""
    raw = (DATA / name).read_bytes()
    # the copy's name: the table's length and CRC-32 (zlib's, in C, where hashlib's import alone costs more than the
    # JSON read saves on a small table); an edit that keeps both is a 1-in-4-billion chance, and the TOML stays
    # the source: delete the folder to be sure
    digest = f"{len(raw):x}-{zlib.crc32(raw):08x}"
    folder = cache_dir()
    kept = folder / f"{name}.{digest}.v{CACHE_FORMAT}.json" if folder is not None else None
    if kept is not None:
        data = _read_kept(kept)
        if data is not None:
            return data
    import tomllib

    data = tomllib.loads(raw.decode("utf-8"))
    if kept is not None:
        _keep(kept, data)
    return data


def _read_kept(path: pathlib.Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _keep(path: pathlib.Path, data: dict[str, Any]) -> None:
    """Write the JSON copy (to a temporary name, then renamed into place, so a reader never sees half of one); only
    if it reads back as the same table, and silently not at all when the folder cannot be written."""
    try:
        text = json.dumps(data, ensure_ascii=False, allow_nan=True)
    except (TypeError, ValueError):
        return
    if json.loads(text) != data:  # a type JSON does not keep (a date): never kept
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # one per writer
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    except OSError:
        pass
