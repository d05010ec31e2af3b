"""Calibration files: the JSON ``servesize calibrate --out`` writes and ``plan --calibration`` reads."""

from __future__ import annotations

import json
import pathlib

from servesize.errors import BadInput
from servesize.limits import MAX_SMALL_FILE_BYTES, parse_json, read_input
from servesize.vllm_logs.calibration import Calibration


def save_calibrations(calibrations: list[Calibration] | tuple[Calibration, ...], path: str | pathlib.Path) -> None:
    """One calibration is written as one object; several as {"calibrations": [...]}."""
    data = calibrations[0].to_dict() if len(calibrations) == 1 else {"calibrations": [c.to_dict() for c in calibrations]}
    pathlib.Path(path).write_text(json.dumps(data, indent=2) + "\n")


def load_calibrations(path: str | pathlib.Path) -> tuple[Calibration, ...]:
    data = parse_json(read_input(path, "calibration", MAX_SMALL_FILE_BYTES).decode("utf-8", errors="replace"), str(path))
    if isinstance(data, dict) and "calibrations" in data:
        return tuple(Calibration.from_dict(d) for d in data["calibrations"])
    return (Calibration.from_dict(data),)


def load_calibration(path: str | pathlib.Path) -> Calibration:
    """The one calibration in ``path`` (a file of several is refused: name the one you mean)."""
    found = load_calibrations(path)
    if len(found) != 1:
        raise BadInput(f"{path} holds {len(found)} calibrations; servesize calibrate --out writes one per log")
    return found[0]


def save_calibration(calibration: Calibration, path: str | pathlib.Path) -> None:
    save_calibrations([calibration], path)
