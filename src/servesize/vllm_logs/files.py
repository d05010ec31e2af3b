"""Calibration files: the JSON ``servesize calibrate --out`` writes and ``plan --calibration`` reads."""

from __future__ import annotations

import json
import pathlib

from servesize.errors import BadInput
from servesize.vllm_logs.calibration import Calibration


def save_calibrations(calibrations: list[Calibration] | tuple[Calibration, ...], path: str | pathlib.Path) -> None:
    """One calibration is written as one object; several as {"calibrations": [...]}."""
    data = calibrations[0].to_dict() if len(calibrations) == 1 else {"calibrations": [c.to_dict() for c in calibrations]}
    pathlib.Path(path).write_text(json.dumps(data, indent=2) + "\n")


def load_calibrations(path: str | pathlib.Path) -> tuple[Calibration, ...]:
    try:
        data = json.loads(pathlib.Path(path).read_text())
    except OSError as exc:
        raise BadInput(f"cannot read calibration {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise BadInput(f"{path} is not JSON ({exc.msg} at line {exc.lineno})") from None
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
