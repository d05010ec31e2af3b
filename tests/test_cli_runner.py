"""The tests run servesize's command line through one runner (tests/cli_runner.py), not a private copy each."""

from __future__ import annotations

import ast
import pathlib

from cli_runner import Ran, run, run_captured, run_json

TESTS = pathlib.Path(__file__).resolve().parent


def _runners(tree: ast.AST) -> list[ast.FunctionDef]:
    """Helpers (not tests) that call main(...) and read what it printed: a command-line runner of their own."""
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef) or fn.name.startswith("test_"):
            continue
        names = {c.func.id if isinstance(c.func, ast.Name) else getattr(c.func, "attr", "")
                 for c in ast.walk(fn) if isinstance(c, ast.Call)}
        if "main" in names and names & {"readouterr", "redirect_stdout", "redirect_stderr"}:
            found.append(fn)
    return found


def test_no_test_file_defines_a_command_line_runner_of_its_own():
    offenders = [f"{path.relative_to(TESTS)}:{fn.lineno} {fn.name}"
                 for path in sorted(TESTS.rglob("*.py")) if path.name != "cli_runner.py"
                 for fn in _runners(ast.parse(path.read_text()))]
    assert offenders == []


def test_the_check_finds_a_runner():
    made = ast.parse("def go(capsys, *argv):\n    code = main(list(argv))\n    return code, capsys.readouterr()\n")
    assert [fn.name for fn in _runners(made)] == ["go"]


def test_the_runner_returns_the_code_and_what_was_printed(capsys):
    ran = run(capsys, "gpus", "--json")
    assert isinstance(ran, Ran) and ran.code == 0 and ran.out.startswith(("[", "{")) and ran == (0, ran.out, ran.err)
    assert run_json(capsys, "gpus", "--json") is not None
    bad = run_captured("plan", "no-such-model", "--gpus", "1xH100")
    assert bad.code == 2 and bad.out == "" and bad.err.startswith("servesize: ")
