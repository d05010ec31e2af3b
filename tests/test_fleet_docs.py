"""docs/fleet.md quotes servesize's output: each quoted command, run again, prints what the page says."""

from __future__ import annotations

import pathlib
import re
import shlex

import pytest

from servesize.cli import main

PAGE = pathlib.Path(__file__).resolve().parent.parent / "docs" / "fleet.md"


def quoted() -> list[tuple[list[str], list[str]]]:
    """(argv, the lines the page shows) of every ``$ servesize ...`` block; a block ending in '...' shows a prefix."""
    out = []
    for block in re.findall(r"```\n(\$ servesize .*?)```", PAGE.read_text(), flags=re.S):
        lines = block.rstrip("\n").splitlines()
        command = lines.pop(0)[2:]
        while command.endswith("\\"):
            command = command[:-1] + " " + lines.pop(0).strip()
        out.append((shlex.split(command)[1:], lines))
    return out


def test_the_page_quotes_commands():
    assert len(quoted()) >= 4


@pytest.mark.parametrize("argv, shown", quoted(), ids=lambda x: " ".join(x)[:60] if isinstance(x, list) and x
                         and x[0] in ("fleet", "plan") else "")
def test_each_quoted_command_prints_what_the_page_shows(capsys, argv, shown):
    assert main(argv) == 0
    printed = capsys.readouterr().out.rstrip("\n").splitlines()
    if shown and shown[-1] == "...":
        shown = shown[:-1]
        printed = printed[:len(shown)]
    assert printed == shown
