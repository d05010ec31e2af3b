"""Calibration files: the JSON ``servesize calibrate --out`` writes and ``plan --calibration`` reads."""

from __future__ import annotations

import json
import pathlib

from servesize.errors import BadInput
from servesize.limits import MAX_SMALL_FILE_BYTES, parse_json, read_input, shown_name, write_output
from servesize.vllm_logs.calibration import Calibration


def save_calibrations(calibrations: list[Calibration] | tuple[Calibration, ...], path: str | pathlib.Path) -> None:
    """One calibration is written as one object; several as {"calibrations": [...]}."""
    data = calibrations[0].to_dict() if len(calibrations) == 1 else {"calibrations": [c.to_dict() for c in calibrations]}
    write_output(path, json.dumps(data, indent=2) + "\n", "--out")


def load_calibrations(path: str | pathlib.Path) -> tuple[Calibration, ...]:
    what = f"calibration {shown_name(str(path))}"
    data = parse_json(read_input(path, "calibration", MAX_SMALL_FILE_BYTES).decode("utf-8", errors="replace"), what)
    if isinstance(data, dict) and "calibrations" in data:
        many = data["calibrations"]
        if not isinstance(many, list) or not many:
            raise BadInput(f"{what}: calibrations must be a list of calibration objects, got {type(many).__name__}")
        return tuple(_one(d, f"{what}: calibrations[{i}]") for i, d in enumerate(many))
    return (_one(data, what),)


def _one(data, where: str) -> Calibration:
    """One calibration object, a refusal naming the file and where in it."""
    try:
        return Calibration.from_dict(data)
    except BadInput as exc:
        raise BadInput(f"{where}: {exc}") from None


def load_calibration(path: str | pathlib.Path) -> Calibration:
    """The one calibration in ``path`` (a file of several is refused: name the one you mean)."""
    found = load_calibrations(path)
    if len(found) != 1:
        raise BadInput(f"{path} holds {len(found)} calibrations; servesize calibrate --out writes one per log")
    return found[0]


def save_calibration(calibration: Calibration, path: str | pathlib.Path) -> None:
    save_calibrations([calibration], path)
