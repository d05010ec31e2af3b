"""The one way the tests run servesize's command line in process (tests/conftest.py's folder is on the path).

    code, out, err = run(capsys, "plan", "llama-3.1-8b", "--gpus", "1xH100")   # capsys read and reset
    doc = run_json(capsys, "plan", ..., "--json")                              # exit 0 asserted, stdout parsed
    code, out, err = run_captured("measure", "pool", ...)                      # no capsys: hypothesis examples

Every argument is given to ``servesize.cli.main`` as ``str(argument)``, so paths and numbers can be passed as they
are. A test file that needs warnings as errors says so with ``pytest.mark.filterwarnings``, not a runner of its own.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from typing import Any, NamedTuple

from servesize.cli import main


class Ran(NamedTuple):
    """One command's exit code and what it printed."""

    code: int
    out: str
    err: str


def _argv(argv: tuple[Any, ...]) -> list[str]:
    return [str(a) for a in argv]


def run(capsys, *argv: Any) -> Ran:
    """``servesize ARGV...`` in process: its exit code and its stdout and stderr, read from (and reset in) capsys."""
    code = main(_argv(argv))
    out, err = capsys.readouterr()
    return Ran(code, out, err)


def run_json(capsys, *argv: Any) -> Any:
    """``run``, asserting exit 0, with stdout read as JSON."""
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    return json.loads(out)


def run_captured(*argv: Any, around: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext) -> Ran:
    """``run`` without capsys (function-scoped, so not reset between hypothesis examples): stdout and stderr are
    redirected for the call, inside ``around()`` (a resource cap, say)."""
    out, err = io.StringIO(), io.StringIO()
    with around(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(_argv(argv))
    return Ran(code, out.getvalue(), err.getvalue())
