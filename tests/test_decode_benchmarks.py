"""Independent references: published per-user decode speeds (vLLM's own nightly benchmark, NVIDIA's NIM tables) against
the plan's decode bounds, the roofline at the low and high ends of the bandwidth and compute efficiency brackets
(data/assumptions.toml). Cases the model is known to miss say why, and are checked to stay missed the way they say."""

import json
import pathlib

import pytest

from servesize.engine.deployment import Deployment
from servesize.engine.memory import memory_report
from servesize.model.catalogue import resolve_model
from servesize.model.hardware import parse_gpus
from servesize.planning.ceilings import CeilingCache, decode_points
from servesize.planning.inputs import Knobs, fixed_from_memory
from servesize.workload.model import EmpiricalClass, Workload

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "decode-benchmarks.json"
DATA = json.loads(FIXTURE.read_text())
SOURCES = {s["id"]: s for s in DATA["sources"]}


def bounds(case):
    """The plan's per-user p50 and its bounds at the case's batch; every decoding sequence holds its prompt plus
    half its output (the mean over its decode)."""
    arch = resolve_model(case["model"]).architecture
    dep = Deployment(tensor_parallel_size=case["tensor_parallel_size"], quantization=case["quantization"],
                     kv_cache_dtype=case["kv_cache_dtype"], max_model_len=8192)
    fixed = fixed_from_memory(memory_report(arch, parse_gpus(case["gpus"]), dep), arch)
    context = case["input_tokens"] + case["output_tokens"] / 2
    workload = Workload(EmpiricalClass("user", [context]), subagent=None, invalidation=0.0, max_model_len=8192)
    (point,) = decode_points(fixed, workload, Knobs(), [case["concurrency"]], CeilingCache())
    return point


@pytest.mark.parametrize("case", DATA["cases"], ids=lambda c: c["id"])
def test_a_published_decode_speed_lies_where_the_fixture_says_against_the_plans_bounds(case):
    point = bounds(case)
    measured = case["per_user_tok_s"]
    if case["expected"] == "inside":
        assert point.low_tok_s <= measured <= point.high_tok_s, (measured, point.low_tok_s, point.high_tok_s)
    else:
        assert case["expected"] == "below" and case["why"].strip()
        assert measured < point.low_tok_s, (measured, point.low_tok_s)


@pytest.mark.parametrize("case", DATA["cases"], ids=lambda c: c["id"])
def test_every_case_derives_its_speed_from_a_quoted_figure(case):
    source = SOURCES[case["source"]]
    assert source["url"].startswith("https://")
    number = case["measured"].split()[-2].replace(",", "")
    assert any(number.rstrip("0").rstrip(".") in quote.replace(",", "") for quote in source["quotes"]), case["id"]
    unit = case["measured"].split()[-1]
    value = float(number)
    derived = (case["output_tokens"] / (value / 1000)) if "latency" in case["measured"] else 1000 / value
    assert unit == "ms" and case["per_user_tok_s"] == pytest.approx(derived, abs=0.01)


def test_the_references_cover_three_gpus_and_a_concurrency_sweep():
    inside = [c for c in DATA["cases"] if c["expected"] == "inside"]
    assert {c["gpus"].split("x", 1)[1] for c in inside} == {"H200", "A100-SXM", "H100"}
    nim = [c["concurrency"] for c in DATA["cases"] if c["source"] == "nvidia-nim-2xh100" and c["input_tokens"] == 5000]
    assert sorted(nim) == [1, 5, 25, 50]
