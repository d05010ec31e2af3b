"""Every output flag of every command, checked before the command's work starts (``check_outputs``).

An output's format comes from its extension (``--plot x.txt`` is refused naming the ones accepted), it is a
regular file or a new one in a writable folder (a directory, device, FIFO or socket is refused), and it is
never one of the command's own input files (``calibrate --vllm-log x.log --out x.log`` would overwrite the
log). An output folder (``measure server --record-dir``) is a writable directory or one that can be created,
never a file. ``limits.check_output`` and ``limits.check_output_dir`` hold the rules; these tables say which
flags are outputs.
"""

from __future__ import annotations

import argparse
import os

from servesize.limits import PLOT_SUFFIXES, check_output, check_output_dir

# dest -> (flag, the extensions accepted, or None for any): workload_fit --out is a workload file
_OUTPUTS: dict[str, tuple[str, tuple[str, ...] | None]] = {
    "plot": ("--plot", PLOT_SUFFIXES),
    "out": ("--out", None),
    "record": ("--record", None),
}
# dest -> flag: outputs that are folders (measure server writes pool.jsonl and sessions.jsonl in it)
_OUTPUT_DIRS: dict[str, str] = {"record_dir": "--record-dir"}
_WORKLOAD_SUFFIXES = (".json", ".toml")  # workload.files.WORKLOAD_SUFFIXES (a test keeps them one)


def _inputs(args: argparse.Namespace) -> list[str]:
    """Every existing file the command line names outside its outputs: what an output must never be."""
    found: list[str] = []
    for dest, value in vars(args).items():
        if dest in _OUTPUTS or dest in _OUTPUT_DIRS or dest.startswith("_"):
            continue
        for v in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(v, (str, os.PathLike)) and "\x00" not in os.fspath(v) and os.path.isfile(v):
                found.append(os.fspath(v))
    return found


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse, in one line, any output flag given that names a path servesize cannot or must not write."""
    inputs = None
    for dest, (flag, suffixes) in _OUTPUTS.items():
        value = getattr(args, dest, None)
        if not isinstance(value, (str, os.PathLike)):
            continue
        if dest == "out" and getattr(args, "_module", "").endswith("workload_fit"):
            suffixes = _WORKLOAD_SUFFIXES
        inputs = _inputs(args) if inputs is None else inputs
        check_output(value, flag, suffixes=suffixes, inputs=tuple(inputs))
    for dest, flag in _OUTPUT_DIRS.items():
        value = getattr(args, dest, None)
        if isinstance(value, (str, os.PathLike)):
            check_output_dir(value, flag)
