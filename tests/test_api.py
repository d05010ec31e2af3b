"""The public API: one Scenario, one engine; the command line is a thin face over the same calls."""

from __future__ import annotations

import argparse
import json
import pathlib

import pytest

import servesize as s
from cli_runner import run_json
from servesize.cli import main
from servesize.flags import add_params, markdown_table, scenario_from_args, scenario_from_flags
from servesize.scenario import FIT_PARAMS, PARAMS, Param, params_in

REPO = pathlib.Path(__file__).resolve().parent.parent
REFERENCE = dict(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8")
FAST = dict(fills=300, draws=1000)


def test_every_name_in_all_is_importable_from_the_package():
    for name in s.__all__:
        assert getattr(s, name) is not None, name
    with pytest.raises(AttributeError):
        s.no_such_thing  # noqa: B018


def test_the_library_plan_equals_the_command_lines_plan(capsys):
    """The issue's 'done when': s.plan(Scenario(...)).ceilings is what `servesize plan ... --json` prints."""
    library = s.plan(s.Scenario(**REFERENCE), sensitivity=False)
    printed = run_json(capsys, "plan", "qwen3.6-27b", "--gpus", "1xH200", "-q", "fp8", "--kv-cache-dtype", "fp8",
                       "--no-sensitivity", "--json")
    assert library.ceilings == printed["ceilings"]
    assert library.binding == printed["binding"]
    assert library.warm_users.to_dict() == printed["warm_users"]
    assert library.recipe == printed["recipe"]
    assert json.loads(json.dumps(library.to_dict(), default=str))["memory"] == printed["memory"]


def test_the_library_memory_equals_the_command_lines_memory(capsys):
    report = s.memory(s.Scenario(model="llama-3.1-8b", gpus="1xH100", max_model_len="32k"))
    printed = run_json(capsys, "memory", "llama-3.1-8b", "--gpus", "1xH100", "--max-model-len", "32k", "--json")
    assert report.pool.kv_cache_tokens == printed["kv_cache_tokens"]
    assert list(report.pool.log_lines) == printed["log_lines"]
    assert report.pool.max_model_len == printed["max_model_len"] == 32_000


def test_the_library_fit_equals_the_command_lines_fit(capsys):
    result = s.fit("4xH100", precision="bf16", budget="simple")
    printed = run_json(capsys, "fit", "--gpus", "4xH100", "--precision", "bf16", "--budget", "simple", "--json")
    assert [p.to_dict() for p in result.placements if p.chosen] == printed["placements"]


def test_the_same_scenario_gives_the_same_plan():
    a = s.plan(s.Scenario(**REFERENCE, **FAST), sensitivity=False)
    b = s.plan(s.Scenario(**REFERENCE, **FAST), sensitivity=False)
    assert a.ceilings == b.ceilings and a.warm_users == b.warm_users


def test_a_plan_is_frozen():
    plan = s.plan(s.Scenario(**REFERENCE, **FAST), sensitivity=False)
    with pytest.raises(AttributeError):
        plan.recipe = "vllm serve something-else"  # type: ignore[misc]


def test_a_scenario_reads_text_the_way_the_command_line_does():
    sc = s.Scenario(model="qwen3.6-27b", gpus="1xH200", max_model_len="180k", gpu_memory="141GB", median="45k")
    assert (sc.max_model_len, sc.gpu_memory, sc.median) == (180_000, 141 * 10**9, 45_000)
    assert sc.explicit() == {"model": "qwen3.6-27b", "gpus": "1xH200", "gpu_memory": 141 * 10**9,
                             "max_model_len": 180_000, "median": 45_000}


@pytest.mark.parametrize("field,value,fragment", [
    ("gpu_memory_utilization", 1.5, "--gpu-memory-utilization 1.5 is out of range: (0, 1]"),
    ("max_model_len", 0, "--max-model-len 0 is out of range"),
    ("max_model_len", "1e400", "--max-model-len '1e400' is not a number as vLLM reads it"),
    ("prefix", "-1", "--prefix '-1' is not a token count"),
    ("tensor_parallel_size", 0, "--tensor-parallel-size 0 is out of range"),
    ("kv_cache_dtype", "fp4", "--kv-cache-dtype 'fp4' is not one of the values vLLM 0.33.0 accepts"),
    ("mfu", float("nan"), "--mfu nan is not a finite number"),
    ("draws", 10**9, "--draws 1,000,000,000 is out of range"),
    ("enforce_eager", "maybe", "--enforce-eager 'maybe' is not true or false"),
    ("vllm_version", "latest", "--vllm-version 'latest' is not a version"),
])
def test_a_scenario_refuses_a_value_outside_its_declaration_in_one_line(field, value, fragment):
    with pytest.raises(s.BadInput) as err:
        s.Scenario(**{**REFERENCE, field: value})
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_replace_refuses_a_field_the_scenario_does_not_have():
    with pytest.raises(s.BadInput, match="no field max_len"):
        s.Scenario(**REFERENCE).replace(max_len=4096)


def test_every_flag_comes_from_the_declaration_with_its_bound(capsys):
    """The command line cannot drift from the Scenario: a bound in the declaration is the flag's bound."""
    for p in params_in("engine", "workload", "knobs", "calibration", "monte_carlo"):
        if p.kind not in ("int", "float", "tokens", "bytes") or p.lo is None:
            continue
        below = p.lo - (0 if p.lo_open else 1)
        if below < 0 and p.kind in ("tokens", "bytes"):
            continue  # a negative count is not a count at all (a parse error, tested below)
        code = main(["plan", "qwen3.6-27b", "--gpus", "1xH200", p.flag, str(below), "--no-sensitivity", "--json"])
        err = capsys.readouterr().err
        assert code == 2 and f"{p.flag} " in err and "out of range" in err, (p.name, err)


def test_each_generated_flag_sets_its_scenario_field():
    parser = argparse.ArgumentParser()
    add_params(parser, PARAMS.values(), required=("gpus",))
    args = parser.parse_args(["qwen3.6-27b", "--gpus", "1xH200", "-tp", "2", "--state-dtype", "bfloat16",
                              "--no-sticky-routing", "--think-time", "43", "--turn-tokens", "1k"])
    sc = scenario_from_args(args)
    assert (sc.tensor_parallel_size, sc.mamba_ssm_cache_dtype, sc.sticky_routing, sc.think_time,
            sc.warm_turn_tokens) == (2, "bfloat16", False, 43.0, 1000)
    assert sc.enable_prefix_caching is None  # not given: the model's default, decided by the engine


def test_predict_text_reads_into_the_same_scenario_as_keywords():
    text = "qwen3.6-27b -q fp8 --gpus 1xH200 --kv-cache-dtype fp8 --max-model-len 180k"
    assert scenario_from_flags(text) == s.Scenario(**REFERENCE, max_model_len=180_000)
    with pytest.raises(s.BadInput, match="--predict"):
        scenario_from_flags("qwen3.6-27b --gpus 1xH200 --no-such-flag 3")
    with pytest.raises(s.BadInput, match="--predict"):
        scenario_from_flags("qwen3.6-27b --gpus '1xH200")


def test_defaults_in_the_help_come_from_the_data_they_name():
    from servesize.assumptions import assumption
    from servesize.workload.model import SEED_USER_MEDIAN_TOKENS

    assert f"default {assumption('decode.bandwidth_efficiency'):g}" in PARAMS["bandwidth_efficiency"].full_help()
    assert f"{SEED_USER_MEDIAN_TOKENS:,}" in PARAMS["median"].full_help()


def test_fit_reuses_the_scenarios_declaration_for_the_flags_they_share():
    for name in ("gpus", "kv_cache_dtype", "gpu_memory_utilization", "vllm_version", "budget"):
        assert FIT_PARAMS[name] is PARAMS[name] or FIT_PARAMS[name] == PARAMS[name]


def test_the_docs_flag_table_is_generated_from_the_declaration():
    committed = (REPO / "docs" / "flags.md").read_text()
    assert committed == markdown_table(), "docs/flags.md is stale: python -m servesize.flags > docs/flags.md"


def test_a_param_states_its_range():
    p = Param("float", "a fraction", "knobs", name="f", lo=0.0, hi=1.0, lo_open=True)
    assert p.range_text() == "(0, 1]"
    assert p.parse("0.5") == 0.5
    with pytest.raises(s.BadInput, match=r"--f 0 is out of range: \(0, 1\]"):
        p.parse(0)


def test_the_mtp_rule_sizes_the_memory_the_recipe_serves():
    """A model with an MTP head is planned with it: its memory holds the draft layers."""
    plan = s.plan(s.Scenario(**REFERENCE, **FAST), sensitivity=False)
    assert plan.memory.deployment.num_speculative_tokens == 2
    assert '"num_speculative_tokens":2' in plan.recipe
    off = s.plan(s.Scenario(**REFERENCE, **FAST, num_speculative_tokens=0), sensitivity=False)
    assert off.memory.deployment.num_speculative_tokens == 0 and "speculative" not in off.recipe
    assert off.result.spec_speedup == 1.0
    seed = s.plan(s.Scenario(**REFERENCE, **FAST, assumptions="seed"), sensitivity=False)
    assert seed.memory.deployment.num_speculative_tokens == 0  # the seed's model ignores the MTP memory


def test_the_workload_cap_is_the_models_own_context_unless_given():
    capped = s.plan(s.Scenario(model="qwen3-32b", gpus="1xH200", **FAST), sensitivity=False)
    assert capped.workload.max_model_len == 40_960 == capped.memory.deployment.max_model_len
    given = s.plan(s.Scenario(model="qwen3-32b", gpus="1xH200", max_model_len="32k", median="8k", prefix="2k", **FAST),
                   sensitivity=False)
    assert given.workload.max_model_len == 32_000 == given.memory.deployment.max_model_len


def test_a_calibrated_pool_wins_over_the_modelled_one():
    plan = s.plan(s.Scenario(**REFERENCE, **FAST, pool_tokens="2.77m"), sensitivity=False)
    assert plan.fixed.pool_tokens == 2_770_000 and plan.fixed.pool_source == "--pool-tokens (measured)"


def test_calibrate_takes_log_text_and_gives_what_a_scenario_takes():
    log = ("INFO 10-03 16:22:17 [kv_cache_utils.py:864] GPU KV cache size: 42,656 tokens\n"
           "INFO 10-03 16:22:17 [kv_cache_utils.py:868] Maximum concurrency for 32,768 tokens per request: 1.30x\n")
    cal = s.calibrate(log, source="quoted")
    assert cal.kv_cache_tokens_logged == 42_656
    facts = s.read_vllm_log(log)
    assert s.calibrate(facts).kv_cache_tokens_logged == 42_656


def test_a_sweep_varies_one_field_and_refuses_others():
    table = s.sweep(s.Scenario(**REFERENCE, **FAST), "median", ["31k", "62k"])
    assert [r["label"] for r in table["rows"]] == ["31k", "62k"]
    assert table["rows"][0]["warm_users"]["p50"] > table["rows"][1]["warm_users"]["p50"]
    with pytest.raises(s.BadInput, match="cannot vary 'gpus'"):
        s.sweep(s.Scenario(**REFERENCE), "gpus", ["2xH200"])
    with pytest.raises(s.BadInput, match="at most"):
        s.sweep(s.Scenario(**REFERENCE), "median", ["31k"] * 65)


def test_a_config_jsons_content_is_a_model_and_plans_like_the_catalogue_entry():
    """An uploaded config.json (the explorer's) is data: parsed, never a path; it plans like its entry."""
    config = json.loads((REPO / "tests" / "fixtures" / "model-configs" / "meta-llama--Meta-Llama-3.1-8B" / "config.json")
                        .read_text())
    inline = s.memory(s.Scenario(model=config, gpus="1xH100", max_model_len="32k"))
    catalogue = s.memory(s.Scenario(model="llama-3.1-8b", gpus="1xH100", max_model_len="32k"))
    assert inline.pool.log_lines == catalogue.pool.log_lines
    assert hash(s.Scenario(model=config, gpus="1xH100")) == hash(s.Scenario(model=dict(config), gpus="1xH100"))
    with pytest.raises(s.BadInput, match="not plain JSON"):
        s.Scenario(model={"model_type": float("nan")}, gpus="1xH100")


def test_a_whole_number_is_read_exactly_up_to_its_bound():
    assert s.Scenario(**REFERENCE, seed="9223372036854775807").seed == 2**63 - 1
    with pytest.raises(s.BadInput, match="--seed 9,223,372,036,854,775,808 is out of range"):
        s.Scenario(**REFERENCE, seed=str(2**63))


def test_a_sweep_refuses_a_value_plan_would_refuse():
    with pytest.raises(s.BadInput, match="no MTP head"):
        s.sweep(s.Scenario(model="llama-3.1-8b", gpus="1xH100", **FAST), "spec_acceptance", ["0.5"])


def test_a_plan_priced_at_a_load_is_the_plan_where_the_load_is_the_plans():
    import math

    import servesize.api as api

    sc = s.Scenario(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8", fills=200)
    plan = s.plan(sc, sensitivity=False)
    at = api.plan(sc, sensitivity=False, load=api.Load()).at_load
    assert at.users == plan.result.values[plan.binding] and not at.given and at.burst == 1.0
    assert at.latency == plan.latency and at.power == plan.power  # the binding ceiling, one miss at a time
    assert plan.at_load is None and "at_load" not in plan.to_dict()
    busy = api.at_load(plan, api.Load(load_users=30, burst=3))
    assert (busy.users, busy.given, busy.burst) == (30.0, True, 3.0)
    assert busy.latency == api.latency_at(plan, 30, burst=3.0)
    # the decoders the decode is read at are the load model's, as its ceiling counts them: not all 30 users at once
    dl = plan.result.decode_load
    assert busy.decoders < 30 and busy.decoders_rule.startswith(f"p{dl.percentile:g} of simultaneous decoders at 30 users")
    at_ceiling = api.at_load(plan, api.Load(load_users=int(plan.result.values["decode"])))
    assert at_ceiling.decoders == dl.decoders_at_percentile and at_ceiling.decode_status != "over"
    assert at.decode_status == "ok"  # the planned users decode comfortably
    assert busy.power.kw_at_meter != plan.power.kw_at_meter  # the bill at 30 users, not at the ceiling
    flush = api.at_load(plan, api.Load(burst=api.BURST_FLUSH))
    assert flush.burst == math.floor(plan.warm_users.p5 / plan.fixed.dp)  # every warm user of the group misses at once
