"""fit: vLLM's --max-model-len and number rule, one row per model unless --all, and every refusal explained at each
placement tried; the bill's currency, price and PUE from flags."""

import json

import pytest

import servesize as s
from cli_runner import run_json
from servesize.cli import main
from servesize.errors import BadInput
from servesize.scenario import FIT_PARAMS, FitQuery
from servesize.units import parse_tokens

GiB = 2**30


def fit_json(capsys, *argv):
    return run_json(capsys, "fit", *argv, "--json")


@pytest.mark.parametrize("text, tokens", [("8k", 8_000), ("8K", 8_192), ("32k", 32_000), ("32K", 32_768),
                                          ("2.77m", 2_770_000), ("1M", 1_048_576), ("1337000", 1_337_000)])
def test_token_counts_are_read_as_vllm_reads_them(text, tokens):
    assert parse_tokens(text) == tokens


@pytest.mark.parametrize("text", ["1,337,000", "1,024", "1_6k", "1_024"])
def test_a_digit_separator_is_refused_as_vllm_refuses_1_6k_and_1_024_with_a_comma(text):
    with pytest.raises(BadInput, match="without ',' or '_'"):
        parse_tokens(text)


def test_a_fraction_with_a_binary_suffix_is_refused_with_the_decimal_spelling():
    with pytest.raises(BadInput, match="did you mean 2.77m"):
        parse_tokens("2.77M")


def test_fit_takes_max_model_len_and_context_as_its_alias_and_says_the_number_it_means(capsys):
    flag = FIT_PARAMS["max_model_len"]
    assert flag.flag == "--max-model-len" and "--context" in flag.flags
    a = fit_json(capsys, "--gpus", "1xH100", "--models", "llama-3.1-8b", "--max-model-len", "32K")
    b = fit_json(capsys, "--gpus", "1xH100", "--models", "llama-3.1-8b", "--context", "32768")
    assert a["context"] == b["context"] == 32_768 and a["placements"] == b["placements"]
    assert FitQuery(gpus="1xH100").max_model_len == 8_192 == parse_tokens("8K")
    assert main(["fit", "--gpus", "1xH100", "--models", "llama-3.1-8b"]) == 0
    assert "--max-model-len 8,192" in capsys.readouterr().out
    assert s.fit("1xH100", context=32_768, models="llama-3.1-8b").context == 32_768  # the library's old name


def test_by_default_one_row_per_model_at_its_checkpoints_precision_and_all_with_all(capsys):
    one = fit_json(capsys, "--gpus", "4xH100")
    models = [p["model"] for p in one["placements"]]
    assert len(models) == len(set(models)) and len(models) < 40
    llama = next(p for p in one["placements"] if p["model"] == "llama-3.1-8b")
    assert "bfloat16" in llama["precision"] and (llama["tp"], llama["replicas"]) == (1, 4)
    every = fit_json(capsys, "--gpus", "4xH100", "--all")
    assert len(every["placements"]) > 2 * len(models)
    assert {p["precision"] for p in every["placements"] if p["model"] == "llama-3.1-8b"} >= {"bf16", "fp8", "int4"}


def test_a_refusal_explains_itself_at_each_placement(capsys):
    # Llama 3.1 70B on 2 x RTX 4090 at 32,000 tokens: int4 fits its weights at TP2 but not one sequence's KV
    assert main(["fit", "--gpus", "2xRTX-4090", "--context", "32k", "--models", "llama-3.1-70b", "--all",
                 "--explain"]) == 0
    out = capsys.readouterr().out
    kv_per_gpu = 80 * (8 // 2) * 128 * 2 * 2 * 32_000    # layers x KV heads per rank x head dim x K,V x bf16 x tokens
    assert f"{kv_per_gpu / GiB:.2f}" == "4.88"
    assert "llama-3.1-70b int4:\n    TP1: llama-3.1-70b does not fit: 37.03 GiB of weights per GPU" in out
    assert "TP2: 18.52 GiB of weights per GPU fit, but one 32,000-token sequence needs 4.88 GiB of KV per GPU and " \
           "1.60 GiB is available" in out  # the engine reserve of docs/accuracy.md (activation from the logs)
    assert main(["fit", "--gpus", "2xRTX-4090", "--context", "32k", "--models", "llama-3.1-70b"]) == 0
    assert "fit nowhere on these GPUs (--explain says why)" in capsys.readouterr().out


def test_the_bill_takes_price_currency_and_pue_from_flags(capsys):
    base = ["qwen3.6-27b", "--gpus", "1xH200", "-q", "fp8", "--kv-cache-dtype", "fp8", "--no-sensitivity", "--fills",
            "200", "--json"]
    assert main(["plan", *base]) == 0
    eur = json.loads(capsys.readouterr().out)["power"]
    assert main(["plan", *base, "--electricity-price", "0.30", "--currency", "USD", "--pue", "1.2"]) == 0
    usd = json.loads(capsys.readouterr().out)["power"]
    assert (eur["currency"], eur["price_per_kwh"], eur["pue"]) == ("EUR", 0.19, 1.5)
    assert (usd["currency"], usd["price_per_kwh"], usd["pue"]) == ("USD", 0.30, 1.2)
    assert usd["kw_at_meter"] == pytest.approx(eur["kw_at_meter"] * 1.2 / 1.5)
    assert usd["cost_per_month"] == pytest.approx(usd["kw_at_meter"] * 720 * 0.30)
    assert main(["plan", *base[:-1], "--electricity-price", "0.30", "--currency", "USD"]) == 0
    power = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("power at"))
    assert "USD" in power and "per month" in power and "(electricity USD 0.3/kWh, PUE 1.5)" in power
