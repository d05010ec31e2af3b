"""What the README tells a user to type works as written."""

from __future__ import annotations

import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()


def fenced(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def test_ci_runs_the_readmes_test_command_verbatim():
    test_command = next(block.strip() for block in fenced("bash") if "pytest" in block)
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert test_command in ci, "the README's test command and .ci/run disagree"


def test_the_readmes_library_example_runs_and_prints_the_ceilings(capsys):
    (example,) = fenced("python")
    exec(compile(example, "README.md", "exec"), {})  # noqa: S102 - the project's own README
    out = capsys.readouterr().out
    assert "'cache':" in out and "'decode':" in out and "GPU KV cache size" in out
