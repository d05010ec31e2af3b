"""The load models are named objects, and every text that describes a ceiling is read from the one that computed
it: the CLI's ceiling lines, the page's tiles and verdict sentence, the glossary (planning/load_models.py)."""

from __future__ import annotations

import pytest

import servesize as s
from servesize.errors import BadInput
from servesize.planning.inputs import Knobs
from servesize.planning.load_models import LOAD_MODELS, load_model
from servesize.render.text import render_text
from servesize.web import views
from servesize.web.glossary import glossary

BASE = {"model": "qwen3.6-27b", "gpus": "1xH200", "quantization": "fp8", "kv_cache_dtype": "fp8", "fills": 200}


@pytest.fixture(scope="module")
def plans():
    return {name: s.plan(s.Scenario(**BASE, assumptions=assumptions), sensitivity=False)
            for name, assumptions in (("duty", "default"), ("every_user", "seed"))}


def test_the_assumption_names_a_model_and_an_unknown_name_is_refused():
    assert load_model(Knobs()).name == "duty" and load_model(Knobs()).cycles
    assert not LOAD_MODELS["every_user"].cycles
    with pytest.raises(BadInput, match="load.model must be one of duty, every_user"):
        load_model(Knobs(overrides=(("load.model", "everyone"),)))


def test_each_plan_is_computed_and_described_by_its_own_model(plans):
    for name, plan in plans.items():
        model = s.api.load_model(plan)
        assert model.name == name
        # the numbers: only the duty cycle prices the load (its decode and TTFT searches)
        assert (plan.result.decode_load is not None) == model.cycles
        assert (plan.result.ttft is not None) == model.cycles
        # the CLI's latency line says the rule that computed the number beside it
        latency = next(line for line in render_text(plan).splitlines() if line.strip().startswith("latency "))
        assert ("load adds" in latency) == model.cycles and ("mean miss TTFT" in latency) != model.cycles
        # the page's tiles and sentence
        v = views.verdict(plan, views.at_load(plan, s.api.Load()))
        means = {c["name"]: c["means"] for c in v["ceilings"]}
        assert means == {c: model.meaning(c) for c in s.api.ceiling_names()}
        assert v["why"] == model.why(plan.result, v["users_text"], float(s.api.knob(plan, "ttft_limit_s")),
                                     plan.fixed.dp)
    assert LOAD_MODELS["duty"].meaning("latency") != LOAD_MODELS["every_user"].meaning("latency")


def test_the_glossary_reads_every_model_and_the_default_rule_for_ttft():
    entries = {g["term"]: g for g in glossary()}
    for model in LOAD_MODELS.values():
        assert model.summary in entries["Load model"]["text"]
    assert LOAD_MODELS["duty"].meaning("latency") in entries["Time to first token"]["text"]
    assert "mean TTFT" not in entries["Time to first token"]["text"]


def test_the_ttft_limit_flag_describes_the_latency_rule_of_the_load_model_the_plan_applies():
    """--ttft-limit's help is read from the load models' words (data/load_models.toml): the default model's latency
    ceiling and the seed's, never the seed's 'mean cold-miss TTFT' alone beside a default that counts turns past it."""
    from servesize.assumptions import assumption
    from servesize.scenario import PARAMS

    text = PARAMS["ttft_limit"].full_help()
    now, seed = LOAD_MODELS[str(assumption("load.model"))], LOAD_MODELS[str(assumption("load.model", "seed"))]
    assert now.meaning("latency") in text and seed.meaning("latency") in text and now is not seed
    assert text.index(now.meaning("latency")) < text.index(seed.meaning("latency"))
