"""The capacity-calculator seed's worked figures (quoted in tests/fixtures/seeds.json), under --budget simple.

The seed rounds parameter counts to 0.1B and prints whole sequences, so where our ledger's count
differs from its rounded figure in the last digit, a count may differ by one (gpt-oss-120b: the
seed's 116.8B vs the ledger's 116.83B gives 242 vs 241)."""

import json

import pytest

from cli_runner import run_captured
from servesize.cli import main
from servesize.units import GiB, KiB

SEED_TABLE = {  # model: (weights GiB, TP, replicas, per replica, across group)
    "llama-3.1-8b": (15.0, 1, 4, 56, 224),
    "llama-3.3-70b": (131.4, 4, 1, 62, 62),
    "mistral-7b-v0.3": (13.5, 1, 4, 58, 232),
    "qwen2.5-32b": (61.0, 2, 2, 41, 82),
    "qwen3-30b-a3b": (56.8, 1, 4, 19, 76),
    "gpt-oss-120b": (217.6, 4, 1, 242, 242),
}


@pytest.fixture(scope="module")
def seed_fit():
    code, out, err = run_captured("fit", "--gpus", "4xH100", "--precision", "bf16", "--budget", "simple",
                                  "--models", ",".join(SEED_TABLE), "--json")
    assert code == 0, err
    return {p["model"]: p for p in json.loads(out)["placements"]}


@pytest.mark.parametrize("model", list(SEED_TABLE))
def test_the_4xh100_table_reproduces_under_the_seeds_simple_budget(seed_fit, model):
    weights_gib, tp, replicas, per_replica, total = SEED_TABLE[model]
    row = seed_fit[model]
    assert row["weights_bytes"] / GiB == pytest.approx(weights_gib, abs=0.15)
    assert (row["tp"], row["replicas"]) == (tp, replicas)
    assert abs(row["concurrent_per_replica"] - per_replica) <= 1
    assert abs(row["concurrent_total"] - total) <= replicas


def test_llama_8b_on_one_h100_worked_example(capsys):
    # weights ~15.0 GiB; KV 2 x 8 x 128 x 2 B x 32 layers = 128 KiB/token; pool 81559 MiB x 0.90 - weights ~57 GiB
    assert main(["memory", "llama-3.1-8b", "--gpus", "1xH100", "--budget", "simple", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kv_bytes_per_token"] == 2 * 8 * 128 * 2 * 32 == 128 * KiB
    assert doc["weights_bytes_per_gpu"] / GiB == pytest.approx(15.0, abs=0.05)
    assert doc["available_kv_bytes_per_gpu"] == int(81559 * 2**20 * 0.90 - doc["weights_bytes_per_gpu"])
    assert doc["available_kv_bytes_per_gpu"] / GiB == pytest.approx(57, abs=0.5)
    pool = doc["available_kv_bytes_per_gpu"]
    assert pool // (128 * KiB * 8192) == 56  # ~56 sequences at 8k
    assert pool // (128 * KiB * 32768) == 14  # ~14 at 32k


def test_the_engine_budget_differs_from_the_simple_one_only_by_the_named_reserve_and_cuda_total(capsys):
    assert main(["memory", "llama-3.1-8b", "--gpus", "1xH100", "--gpu-memory-utilization", "0.9", "--json"]) == 0
    engine = json.loads(capsys.readouterr().out)
    assert main(["memory", "llama-3.1-8b", "--gpus", "1xH100", "--gpu-memory-utilization", "0.9", "--budget", "simple", "--json"]) == 0
    simple = json.loads(capsys.readouterr().out)
    b = engine["budget"]
    reserve = b["activation_peak_bytes"] + b["non_torch_bytes"] + b["cudagraph_bytes"]
    smaller_total = (simple["budget"]["total_bytes_per_gpu"] - b["total_bytes_per_gpu"]) * 0.9
    assert simple["available_kv_bytes_per_gpu"] - engine["available_kv_bytes_per_gpu"] == pytest.approx(reserve + smaller_total, abs=2)
