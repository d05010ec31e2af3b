"""Workload files: read and write the JSON / TOML that ``servesize workload fit`` writes and
``servesize plan --workload`` reads (``Workload.to_dict`` / ``Workload.from_dict`` are the format)."""

from __future__ import annotations

import json
import pathlib
import tomllib
from typing import TYPE_CHECKING, Any

from servesize.errors import BadInput
from servesize.limits import MAX_SMALL_FILE_BYTES, check_depth, check_numbers, check_output, parse_json, read_input, write_output
from servesize.workload.model import Workload
from servesize.workload.presets import WorkloadOrigin, file_preset, preset, workload_from_data

if TYPE_CHECKING:  # a plan reads workload files without loading the fitter
    from servesize.workload.fit import WorkloadFit

WORKLOAD_SUFFIXES = (".json", ".toml")


def read_workload_data(path) -> dict:
    """The table a JSON or TOML workload file holds (as written by ``servesize workload fit``)."""
    p = pathlib.Path(path)
    text = read_input(p, "workload file", MAX_SMALL_FILE_BYTES).decode("utf-8", errors="replace")
    if p.suffix.lower() == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise BadInput(f"workload file {str(p)!r} is not valid TOML: {exc}") from None
        except RecursionError:
            raise BadInput(f"workload file {str(p)!r}: TOML nested deeper than Python's reader allows") from None
        check_depth(data, f"workload file {str(p)!r}")
    else:
        data = parse_json(text, f"workload file {str(p)!r}")
    if not isinstance(data, dict):
        raise BadInput(f"workload file {str(p)!r} must hold a table/object at the top level")
    check_numbers(data, f"workload file {str(p)!r}")
    return data


def load_workload(path) -> Workload:
    """A workload file read over the preset it names (coding-agent when it names none)."""
    return workload_of_data(read_workload_data(path), str(path))


def workload_of_data(data: dict, where: str) -> Workload:
    """A workload file's content (``where``: its name in errors) over the preset it names (coding-agent when it names
    none): what ``plan --workload FILE`` plans, whether the content was read from a file or uploaded."""
    chosen = preset(file_preset(data))
    return workload_from_data(data, chosen.workload(), WorkloadOrigin.of_preset(chosen), where)[0]


def save_workload(workload: Workload, path) -> pathlib.Path:
    """Write JSON (default) or TOML (``.toml`` suffix); ``fit`` metadata is not part of it."""
    return save_workload_dict(workload.to_dict(), path)


def to_toml(data: dict) -> str:
    """The workload file as TOML (tomli-w): None is left out (TOML has no null: an absent key); numpy
    scalars are written as the numbers they hold; a value TOML cannot hold raises TypeError."""
    import tomli_w  # only the TOML path needs the writer

    return tomli_w.dumps(_toml_ready(data))


def _toml_ready(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _toml_ready(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_toml_ready(v) for v in value]
    if not isinstance(value, (bool, int, float, str)) and hasattr(value, "tolist"):  # numpy scalars
        return value.tolist()
    return value


def save_workload_dict(data: dict, path) -> pathlib.Path:
    p = pathlib.Path(path)
    if p.suffix.lower() == ".toml":
        # TOML has no null, and an absent table means "the preset's": no subagent class is an empty table
        text = to_toml({**data, "subagent": {}} if "subagent" in data and data["subagent"] is None else data)
    else:
        text = json.dumps(data, indent=2) + "\n"
    write_output(check_output(p, "workload file", suffixes=WORKLOAD_SUFFIXES), text, "workload file")
    return p


def write_workload(result: WorkloadFit, path) -> str:
    """Write the workload file (JSON, or TOML for a .toml name) that ``plan --workload`` reads."""
    save_workload_dict(result.workload_dict(), path)
    result.out = str(path)
    return result.out
