"""Request JSON -> Scenario, or a refusal that names the field (the explorer's HTTP 400)."""

from __future__ import annotations

import json
import pathlib

import pytest

import servesize as s
from servesize.errors import DoesNotFit
from servesize.model.catalogue import InlineConfig
from servesize.scenario import PARAMS
from servesize.web.form import BURST_FLUSH, MAX_GPUS, VIEW_PARAMS, WEB_LIMITS, form
from servesize.web.requests import RequestError, field_of, fit_query, plan_request, scenario_of

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures"
QWEN3_8B = FIXTURES / "model-configs" / "Qwen--Qwen3-8B" / "config.json"
BASE = {"model": "qwen3.6-27b", "gpus": "1xH200"}


def refused(body) -> RequestError:
    with pytest.raises(RequestError) as info:
        plan_request(body)
    return info.value


def test_a_request_reads_fields_as_the_command_line_does():
    req = plan_request({**BASE, "median": "45k", "kv_cache_dtype": "fp8", "enable_prefix_caching": "off"})
    assert req.scenario == s.Scenario(model="qwen3.6-27b", gpus="1xH200", median=45_000, kv_cache_dtype="fp8",
                                      enable_prefix_caching=False)
    assert req.draft is False and req.load.given() == {}


@pytest.mark.parametrize("name", ["bogus", "sensitivity", "path"])
def test_an_unknown_field_is_refused_and_named(name):
    err = refused({**BASE, name: 1})
    assert err.field == name and "unknown field" in str(err)


@pytest.mark.parametrize(("name", "value"), [("max_model_len", 0), ("median", "abc"), ("sigma", 9),
                                            ("gpu_memory_utilization", 1.5), ("tensor_parallel_size", 0),
                                            ("kv_cache_dtype", "fp7"), ("load_users", 0), ("pue", 0.5)])
def test_a_value_out_of_its_declared_bounds_names_its_field(name, value):
    err = refused({**BASE, name: value})
    assert err.field == name
    param = PARAMS.get(name) or VIEW_PARAMS[name]
    assert param.flag in str(err)  # the Scenario's own one-line message, as the CLI prints it


@pytest.mark.parametrize("model", ["/etc/passwd", "./config.json", "~/models/x", "some-org/some-model", "config.json"])
def test_a_model_that_is_a_path_or_a_hugging_face_id_outside_the_catalogue_is_refused(model):
    err = refused({**BASE, "model": model})
    assert err.field == "model" and "upload" in str(err)


def test_a_catalogue_entry_may_be_named_by_its_hugging_face_id():
    assert plan_request({**BASE, "model": "Qwen/Qwen3.6-27B"}).scenario.model == "Qwen/Qwen3.6-27B"


def test_an_uploaded_config_is_parsed_in_memory():
    config = json.loads(QWEN3_8B.read_text())
    req = plan_request({**BASE, "model": config})
    assert isinstance(req.scenario.model, InlineConfig) and req.scenario.model.config() == config


@pytest.mark.parametrize("name", ["workload", "calibration"])
def test_a_workload_or_calibration_given_as_a_path_is_refused(name):
    err = refused({**BASE, name: "/etc/passwd"})
    assert err.field == name and "reads no files" in str(err)


def test_an_uploaded_workload_is_a_workload_files_content():
    body = s.Workload.seed_reference().replace(invalidation=0.05).to_dict()
    assert plan_request({**BASE, "workload": body}).scenario.workload == s.Workload.from_dict(body)
    err = refused({**BASE, "workload": {**body, "colour": "blue"}})
    assert err.field == "workload" and "colour" in str(err)


@pytest.mark.parametrize("name", sorted(WEB_LIMITS))
def test_work_per_request_is_capped(name):
    most = WEB_LIMITS[name]
    assert plan_request({**BASE, name: most}).scenario.__getattribute__(name) == most
    err = refused({**BASE, name: most + 1})
    assert err.field == name and f"{most:,}" in str(err)


def test_the_gpu_count_is_capped():
    err = refused({**BASE, "gpus": f"{MAX_GPUS + 1}xH200"})
    assert err.field == "gpus"


def test_the_load_fields_are_the_pages_own_and_typed():
    req = plan_request({**BASE, "load_users": "120", "burst": BURST_FLUSH, "pue": 1.2, "draft": True})
    assert (req.load.load_users, req.load.burst, req.draft) == (120, BURST_FLUSH, True)
    assert req.scenario.pue == 1.2  # the tariff is the Scenario's own (servesize plan --pue)
    assert refused({**BASE, "draft": "yes"}).field == "draft"


@pytest.mark.parametrize("body", [[1, 2], "text", None])
def test_a_body_that_is_not_an_object_is_refused(body):
    assert refused(body).field is None


@pytest.mark.parametrize("missing", ["model", "gpus"])
def test_model_and_gpus_are_required(missing):
    body = dict(BASE)
    del body[missing]
    assert refused(body).field == missing


def refused_by_library(call, *args, **kwargs) -> s.ServesizeError:
    with pytest.raises(s.ServesizeError) as info:
        call(*args, **kwargs)
    return info.value


def test_a_library_refusal_carries_the_field_it_checked():
    # the engine's refusal: bf16 Llama 3.1 70B (~141 GB of weights) on one 80 GB H100 names the split
    assert field_of(refused_by_library(s.memory, s.Scenario(model="llama-3.1-70b", gpus="1xH100"))) \
        == "tensor_parallel_size"
    # a declared bound (Param.parse), under the field's own name, whichever spelling its flag has
    err = refused_by_library(s.Scenario, model="qwen3.6-27b", gpus="1xH200", num_speculative_tokens=10 ** 6)
    assert err.field == "num_speculative_tokens" and "out of range" in str(err)
    # the vLLM release's vocabulary, checked with the Scenario
    assert refused_by_library(s.Scenario, model="qwen3.6-27b", gpus="1xH200", kv_cache_dtype="fp7").field \
        == "kv_cache_dtype"
    # the workload's own rule (a prefix at or above the median session), checked when the Scenario is resolved
    assert refused_by_library(s.plan, s.Scenario(model="qwen3.6-27b", gpus="1xH200", median=4000, prefix=8000),
                              sensitivity=False).field == "prefix"


def test_a_refusal_that_names_no_field_is_the_models_when_it_does_not_fit():
    assert field_of(DoesNotFit("x does not fit")) == "model"
    assert field_of(DoesNotFit("x does not fit", field="gpus")) == "gpus"
    assert field_of(s.BadInput("the request as a whole")) is None


def test_a_fit_query_takes_only_catalogue_models():
    assert fit_query({"gpus": "4xH100", "max_model_len": "32K"}) == s.FitQuery(gpus="4xH100", max_model_len=32768)
    with pytest.raises(RequestError) as info:
        fit_query({"gpus": "4xH100", "models": "llama-3.1-8b,/etc/passwd"})
    assert info.value.field == "models"


def test_scenario_of_passes_the_extra_fields_through_unread():
    scenario, rest = scenario_of({**BASE, "vllm_log": "x"}, extra=("vllm_log",))
    assert scenario.model == "qwen3.6-27b" and rest == {"vllm_log": "x"}


def test_the_form_is_the_declaration():
    plan_fields = form()["plan"]["fields"]
    # the disaggregated layout is the command line's until the page gains its control (issue 32, item 8)
    assert {n for n, p in PARAMS.items() if p.group == "disagg"}.isdisjoint(plan_fields)
    for name, p in PARAMS.items():
        if p.group == "disagg":
            continue
        assert plan_fields[name]["flag"] == p.flag and plan_fields[name]["lo"] == p.lo and plan_fields[name]["hi"] == p.hi
        assert plan_fields[name]["help"] == p.full_help()
    shown = {f for section in form()["plan"]["sections"] for f in section["fields"]}
    assert {n for n, p in PARAMS.items() if p.group != "disagg"} - shown <= {
        "calibration", "tensor_parallel_size", "data_parallel_size", "users"}  # fleet sizing: the fleet view's, not this form's
