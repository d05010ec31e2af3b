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


def test_ci_stops_when_any_step_of_the_readmes_command_fails(tmp_path):
    """`set -e` does not fire inside a non-final && link: .ci/run must still stop when pip or a set-up
    script fails. The block around the command is run with its first link failing."""
    import subprocess

    test_command = next(block.strip() for block in fenced("bash") if "pytest" in block)
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    at = ci.index(test_command)
    assert (ci[at - 1], ci[at + 1]) == ("(", ")"), "the README's command runs in a subshell of its own"
    script = tmp_path / "run"
    script.write_text("\n".join(["set -euo pipefail", "(", "false && echo tests-ran", ")", "echo lint-ran"]) + "\n")
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and "ran" not in done.stdout
    assert "set -euo pipefail" in ci


def test_the_readmes_library_example_runs_and_prints_the_ceilings(capsys):
    (example,) = fenced("python")
    exec(compile(example, "README.md", "exec"), {})  # noqa: S102 - the project's own README
    out = capsys.readouterr().out
    assert "'cache':" in out and "'decode':" in out and "GPU KV cache size" in out
