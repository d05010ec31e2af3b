"""The small library functions the explorer draws from, as worked examples: a length distribution's
mass per bin, a Scenario back to its flags, the bill at another load, the decode curve on
the plan's own context bank, and a run record read from its text."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import servesize as s
from servesize.errors import BadInput
from servesize.flags import flags_of, flags_text, scenario_from_flags
from servesize.measure.record import parse_record
from servesize.planning.ceilings import CeilingCache, contexts_of, decode_setup
from servesize.planning.decode import decode_curve
from servesize.planning.plan import power_of
from servesize.workload.model import EmpiricalClass, SessionClass, length_mass

# -- length_mass --------------------------------------------------------------------------------------


def test_a_lognormal_class_puts_half_its_mass_below_the_median_and_all_of_it_somewhere():
    cls = SessionClass("user", 31_000, 0.81)
    mass = length_mass(cls, [0, 31_000, math.inf])
    assert mass == pytest.approx([0.5, 0.5], abs=1e-12)


def test_a_lognormal_bin_is_the_normal_cdf_of_its_log_edges():
    cls = SessionClass("user", 1000, 0.5)
    one_sigma_up = 1000 * math.exp(0.5)
    expected = 0.5 * (math.erf(1 / math.sqrt(2)) - math.erf(0))  # P(0 < z < 1)
    assert length_mass(cls, [1000, one_sigma_up])[0] == pytest.approx(expected, rel=1e-12)


def test_an_empirical_class_gives_the_share_of_its_observations_per_bin():
    cls = EmpiricalClass("logs", [100, 2000, 2500, 50_000])
    assert length_mass(cls, [0, 1000, 10_000, math.inf]).tolist() == [0.25, 0.5, 0.25]


@pytest.mark.parametrize("edges", [[5], [10, 5], [-1, 5]])
def test_bins_must_be_increasing_and_non_negative(edges):
    with pytest.raises(BadInput):
        length_mass(SessionClass("u", 10, 1), edges)


# -- flags_of ---------------------------------------------------------------------------------------------

SCENARIOS = [
    dict(model="qwen3.6-27b", gpus="1xH200"),
    dict(model="llama-3.1-70b", gpus="2xH100", tensor_parallel_size=2, quantization="fp8", kv_cache_dtype="fp8",
         max_model_len="64k", enable_prefix_caching=False, median="45k", sigma=0.9, invalidation=0.05),
    dict(model="qwen3-8b", gpus="2xH100", data_parallel_size=2, cpu_offload_gib=64.5, sticky_routing=False,
         bandwidth_efficiency=0.8, fills=700, seed=3, subagents_share_prefix=True),
]


@pytest.mark.parametrize("fields", SCENARIOS)
def test_a_scenarios_flags_read_back_to_the_same_scenario(fields):
    scenario = s.Scenario(**fields)
    assert scenario_from_flags(flags_text(scenario)) == scenario


def test_only_the_fields_that_differ_from_their_defaults_are_written_and_groups_select():
    scenario = s.Scenario(model="qwen3-8b", gpus="1xH100", median="45k", kv_cache_dtype="fp8")
    assert flags_of(scenario) == ["qwen3-8b", "--gpus", "1xH100", "--kv-cache-dtype", "fp8", "--median", "45000"]
    assert flags_of(scenario, ("model", "engine")) == ["qwen3-8b", "--gpus", "1xH100", "--kv-cache-dtype", "fp8"]


def test_an_object_field_has_no_words():
    workload = s.Workload.seed_reference().replace(invalidation=0.2)
    assert "--workload" not in flags_of(s.Scenario(model="qwen3-8b", gpus="1xH100", workload=workload))


# -- power_of at another load ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def plan():
    return s.plan(s.Scenario(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8"),
                  sensitivity=False)


def test_the_bill_by_default_is_the_plans_own(plan):
    bill, note = power_of(plan.fixed, plan.workload, plan.knobs, plan.result)
    assert bill.to_dict() == plan.power.to_dict() and note == plan.power_note


def test_a_lighter_load_spends_less_time_prefilling(plan):
    users = plan.result.values[plan.binding]
    light, note = power_of(plan.fixed, plan.workload, plan.knobs, plan.result, users=users / 2)
    assert light.d_p == pytest.approx(plan.power.d_p / 2, rel=1e-12)
    assert "load of" in note


# -- decode_curve on the plan's own bank ----------------------------------------------------------------------

def test_the_curve_on_the_plans_bank_meets_the_floor_exactly_at_the_decode_ceiling(plan):
    setup = decode_setup(plan.fixed, plan.knobs)
    bank = contexts_of(plan.workload, plan.knobs, setup.topk_tokens, CeilingCache())
    n = plan.result.decode.n
    curve = decode_curve(setup, None, [n, n + 1], bank=bank)
    floor = plan.result.decode.floor_tok_s
    assert curve["p50"][0] >= floor > curve["p50"][1]
    assert curve["p50"][0] == pytest.approx(plan.result.decode.at_ceiling.p50_tok_s, rel=1e-12)
    assert np.all(curve["aggregate_p50"] == np.array([n, n + 1]) * curve["p50"])


# -- a run record from its text ------------------------------------------------------------------------------------

def test_a_record_reads_from_its_text_as_from_its_file(tmp_path):
    lines = [{"type": "header", "kind": "pool", "params": {}}, {"type": "round", "n": 1}, {"type": "end", "result": {}}]
    text = "\n".join(json.dumps(x) for x in lines) + '\n{"type": "rou'
    contents = parse_record(text, "upload", "pool")
    assert contents.header["kind"] == "pool" and [e["type"] for e in contents.events] == ["round", "end"]
    assert contents.torn_tail


@pytest.mark.parametrize("text", ["[1]\n", '{"type": "round"}\n', "not json\n{}\n"])
def test_text_that_is_not_a_record_is_refused_in_one_line(text):
    with pytest.raises(BadInput):
        parse_record(text, "upload")
