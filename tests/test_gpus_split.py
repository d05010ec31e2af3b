"""--gpus NxGPU plans every GPU it names: servesize chooses the TP/DP left unsaid (fit's rule), flags given
win, and a split that leaves GPUs idle says so."""

from __future__ import annotations

import json

import pytest

import servesize as s
from servesize.cli import main
from servesize.engine.placement import DEFAULT_MIN_CONCURRENCY
from servesize.engine.versions import parse_version
from servesize.errors import BadInput
from servesize.render.text import render_text
from servesize.resolve import served

QUICK = {"fills": 30, "draws": 500}


def _smallest_tp_holding_enough(model: str, gpu: str, count: int, **flags) -> int:
    """The worked example of fit's rule: the smallest power-of-two TP whose one replica holds at least
    DEFAULT_MIN_CONCURRENCY sequences of --max-model-len (memory's own max concurrency)."""
    for tp in (t for t in (1, 2, 4, 8) if t <= count):
        try:
            report = s.memory(s.Scenario(model=model, gpus=f"{tp}x{gpu}", tensor_parallel_size=tp, **flags))
        except s.ServesizeError:
            continue
        if report.pool.max_concurrency >= DEFAULT_MIN_CONCURRENCY:
            return tp
    raise AssertionError("no TP holds enough")


@pytest.mark.parametrize("model", ["qwen3-8b", "llama-3.3-70b"])
def test_plan_on_8xh100_uses_all_eight_gpus_and_names_the_split(model):
    plan = s.plan(s.Scenario(model=model, gpus="8xH100", **QUICK), sensitivity=False)
    placement = plan.to_dict()["placement"]
    tp = _smallest_tp_holding_enough(model, "H100", 8, max_model_len=plan.fixed.max_model_len)
    assert (placement["tp"], placement["dp"], placement["pp"]) == (tp, 8 // tp, 1)
    assert placement["tp"] * placement["dp"] * placement["pp"] == placement["gpus_used"] == 8
    assert placement["chosen"] and placement["gpus_idle"] == 0
    assert f"TP {tp}: the smallest TP whose replica holds >= {DEFAULT_MIN_CONCURRENCY}" in placement["reason"]
    assert (plan.fixed.tp, plan.fixed.dp, plan.fixed.n_gpu) == (tp, 8 // tp, 8)


def test_the_cli_json_and_text_name_the_split_first(capsys):
    assert main(["plan", "qwen3-8b", "--gpus", "8xH100", "--fills", "30", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["placement"]["gpus_used"] == 8 and doc["gpus"] == "8xH100-SXM"
    assert main(["plan", "qwen3-8b", "--gpus", "8xH100", "--fills", "30"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("placement: 8 of 8 GPUs as TP 1 x DP 8: TP 1: the smallest TP")


def test_memory_on_8xh100_is_per_replica_and_says_how_many_replicas():
    report = s.memory(s.Scenario(model="qwen3-8b", gpus="8xH100"))
    one = s.memory(s.Scenario(model="qwen3-8b", gpus="1xH100"))
    assert (report.deployment.tensor_parallel_size, report.replicas) == (1, 8)
    assert report.to_dict()["placement"]["gpus_used"] == 8
    assert report.pool.usable_kv_tokens == one.pool.usable_kv_tokens  # one replica's pool, each its own
    text = render_text(report)
    assert text.splitlines()[0].startswith("placement: 8 of 8 GPUs as TP 1 x DP 8")
    assert "(8 replicas, each its own pool)" in text


def test_a_given_tp_wins_and_dp_fills_the_gpus():
    report = s.memory(s.Scenario(model="qwen3-8b", gpus="8xH100", tensor_parallel_size=2))
    assert (report.deployment.tensor_parallel_size, report.deployment.data_parallel_size) == (2, 4)
    assert report.placement.reason.startswith("TP 2 as given; DP 4")


def test_a_given_split_that_leaves_gpus_idle_says_so():
    report = s.memory(s.Scenario(model="qwen3-8b", gpus="8xH100", tensor_parallel_size=2, data_parallel_size=2))
    assert (report.deployment.tensor_parallel_size, report.deployment.data_parallel_size) == (2, 2)
    assert report.placement.gpus_idle == 4 and "4 of 8 GPUs idle" in report.placement.reason
    odd = s.memory(s.Scenario(model="qwen3-8b", gpus="6xH100", tensor_parallel_size=4))
    assert odd.placement.gpus_idle == 2 and "TP 4 x PP 1 does not divide 6" in odd.placement.reason


def test_a_tp_the_heads_refuse_is_never_chosen_and_six_gpus_are_all_used():
    report = s.memory(s.Scenario(model="qwen3-8b", gpus="6xH100", max_model_len=131072 // 4))
    tp, dp = report.deployment.tensor_parallel_size, report.deployment.data_parallel_size
    assert tp * dp == 6 and 32 % tp == 0  # qwen3-8b has 32 attention heads: TP 3 and 6 are refused
    assert [t.split(":")[0] for t in report.placement.tried] == ["TP 1", "TP 2", "TP 4"]  # 3 and 6 not tried


def test_when_no_tp_fits_the_widest_the_heads_allow_says_why():
    with pytest.raises(s.ServesizeError, match="one request at max_model_len 131,072 needs 20.00 GiB of KV cache"):
        s.memory(s.Scenario(model="llama-3.3-70b", gpus="3xH100"))  # TP 2 (3 divides no head count of 64)


def test_a_measured_pool_fixes_tp_and_only_dp_is_chosen():
    flags = {"model": "qwen3-32b", "gpus": "8xH100", "max_model_len": 32768, **QUICK}
    modelled = s.plan(s.Scenario(**flags), sensitivity=False)
    measured = s.plan(s.Scenario(pool_tokens=100_000, **flags), sensitivity=False)
    assert modelled.fixed.tp > 1  # one TP-1 replica holds too few 32k sequences: fit's rule widens it
    assert (measured.fixed.tp, measured.fixed.dp) == (1, 8)  # the pool measured is one TP-1 replica's


def test_a_split_written_out_is_planned_as_written():
    plan = s.plan(s.Scenario(model="qwen3-8b", gpus="4xH100", tensor_parallel_size=4, **QUICK), sensitivity=False)
    assert plan.placement.to_dict() | {"tried": []} == {"tp": 4, "dp": 1, "pp": 1, "gpus": 4, "gpus_used": 4,
                                                        "gpus_idle": 0, "chosen": False,
                                                        "reason": "TP x DP x PP as given", "tried": []}


# -- the --vllm-serve reader refuses what the release does not know -------------------------------------------

V = parse_version("0.33.0")


@pytest.mark.parametrize("value", ["int4", "int8", "bf16", "native", "nvfp4"])
def test_the_serve_reader_refuses_servesizes_own_precision_names_as_quantization(value):
    with pytest.raises(BadInput, match=f"--quantization '{value}' is not a value vllm serve 0.33.0 accepts"):
        served(f"vllm serve meta-llama/Llama-3.3-70B-Instruct --quantization {value}", V)


def test_the_serve_reader_refuses_an_unknown_kv_cache_dtype_and_takes_the_known():
    with pytest.raises(BadInput, match="--kv-cache-dtype 'fp9' is not a value"):
        served("vllm serve Qwen/Qwen3-8B --kv-cache-dtype fp9", V)
    assert served("vllm serve Qwen/Qwen3-8B --kv-cache-dtype fp8 --quantization=fp8", V).fields == {
        "kv_cache_dtype": "fp8", "quantization": "fp8"}


def test_the_serve_reader_takes_each_releases_own_vocabulary():
    assert served("vllm serve x --quantization nvfp4", parse_version("0.8.5")).fields["quantization"] == "nvfp4"
    with pytest.raises(BadInput, match="'nvfp4' is not a value vllm serve 0.9.2"):
        served("vllm serve x --quantization nvfp4", parse_version("0.9.2"))
    assert served("vllm serve x --quantization auto-round", parse_version("0.14.0")).fields["quantization"] == "auto-round"
    with pytest.raises(BadInput, match="'auto-round' is not a value vllm serve 0.15.0"):
        served("vllm serve x --quantization auto-round", parse_version("0.15.0"))


def test_the_cli_refuses_a_serve_line_with_quantization_int4_in_one_line(capsys):
    code = main(["memory", "--vllm-serve", "vllm serve meta-llama/Llama-3.3-70B-Instruct -tp 8 --quantization int4",
                 "--gpus", "8xA100-40GB"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--quantization 'int4' is not a value vllm serve" in err and "Traceback" not in err
