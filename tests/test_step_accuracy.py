"""The step model against measured vLLM runs (docs/accuracy.md 'Time against measured runs').

tests/fixtures/measured/step-accuracy.json holds, for every measured run servesize can express, the `servesize
bench` command line and what it predicted when scripts/step_accuracy.py --write last ran. Here every one of those
command lines runs again through the CLI and must give the same figures, so the errors docs/accuracy.md reports
are the errors of the code as it is; and the table there is recomputed from them."""

from __future__ import annotations

import json
import pathlib
import statistics

import pytest

from servesize.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULT = json.loads((ROOT / "tests" / "fixtures" / "measured" / "step-accuracy.json").read_text())
RUNS = RESULT["runs"]
KEYS = {"tpot": "mean_tpot_ms", "ttft": "mean_ttft_ms", "output_throughput": "output_throughput"}


def test_the_runs_cover_both_parts_and_every_source():
    parts = {r["split"] for r in RUNS}
    sources = {r["source"] for r in RUNS}
    assert parts == {"fit", "held-out"}
    assert {"aiconfigurator-silicon-vllm.csv", "vllm-bench-published-other.json"} <= sources
    # the split is by deployment: no deployment has runs on both sides
    sides: dict[str, set] = {}
    for r in RUNS:
        sides.setdefault(r["deployment"], set()).add(r["split"])
    assert all(len(s) == 1 for s in sides.values())


@pytest.mark.parametrize("run", RUNS, ids=[r["id"][:60] for r in RUNS])
def test_servesize_bench_reproduces_the_prediction_the_table_reports(run, capsys):
    assert main(["bench", *run["argv"], "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    # to a part in 10,000, not bit for bit: numpy's reductions may sum in another order on another CPU (AVX-512 or
    # not), and the table reports whole percents
    for q, key in KEYS.items():
        if run["predicted"].get(q) is not None:
            assert doc[key] == pytest.approx(run["predicted"][q], rel=1e-4, abs=1e-9), q
        measured = run["measured"].get(q)
        if measured:
            assert run["errors"][q] == pytest.approx(doc[key] / measured - 1.0, abs=1e-4)


def _median_abs(part: str, q: str) -> float | None:
    errs = [abs(r["errors"][q]) for r in RUNS if r["split"] == part and r["errors"].get(q) is not None]
    return statistics.median(errs) if errs else None


@pytest.mark.parametrize("part", ["fit", "held-out"])
def test_the_summary_is_the_runs_own(part):
    summary = RESULT["summary"][part]
    for q in KEYS:
        got = _median_abs(part, q)
        assert (summary[q]["median_abs_error"] is None) == (got is None)
        if got is not None:
            assert summary[q]["median_abs_error"] == pytest.approx(got)


def test_docs_quote_the_held_out_figures():
    text = (ROOT / "docs" / "accuracy.md").read_text()
    held = RESULT["summary"]["held-out"]
    for q in ("tpot", "ttft"):
        assert f"{100 * held[q]['median_abs_error']:.0f}%" in text


def test_a_step_term_is_labelled_fitted_exactly_when_the_fit_searches_it():
    """The plan's assumption table says 'fitted' or 'measured' from each term's declared basis
    (data/assumptions.toml); the basis must be the fit's own: 'fitted' for each term scripts/step_accuracy.py
    searches, 'measured' or 'not fitted' for the others."""
    import importlib.util

    from servesize.assumptions import modelled_assumptions
    from servesize.planning.plan import step_term_names

    root = pathlib.Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("step_accuracy", root / "scripts" / "step_accuracy.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    import sys
    sys.modules.setdefault("step_accuracy", script)  # its dataclasses look their module up
    spec.loader.exec_module(script)
    table = modelled_assumptions()
    based = {k: row["basis"] for k, row in table.items() if "basis" in row}
    assert {k for k, b in based.items() if b == "fitted"} == set(script.SEARCH)
    assert set(based.values()) == {"fitted", "measured", "not fitted"}

    class _Every:  # a deployment that names every term: each weight format, AMD, FP4 experts, a measured GPU
        weight_format, peak_dtype, vendor, expert_bytes, expert_kernel_rule = "fp8_block", "fp8", "AMD", 1, ""
        memory_kernel_factor, fp8_prefill_share, expert_kernel_bytes_per_s = 0.9, 0.8, 0.0
    from servesize.resolve import plan_inputs
    from servesize.scenario import Scenario

    knobs = plan_inputs(Scenario(model="qwen3-30b-a3b", gpus="1xH200")).knobs
    names = set(step_term_names(_Every(), knobs))  # type: ignore[arg-type]
    names |= {f"step.kernel_efficiency_{f}" for f in ("fp8_tensor", "fp4", "int4", "int8")}
    names |= {"step.fp4_moe_kernel_rate", "step.bf16_moe_kernel_rate"}
    assert names <= set(based), sorted(names - set(based))
