"""servesize against the real engine: its prediction, its pool measurement, its session ladder.

Uses the session's real vLLM CPU server (tests/integration/conftest.py): a tiny random-weight
Llama, prefix caching on, 16 MiB of KV cache, block size 32.
"""

from __future__ import annotations

import pytest
from vllm_server import SESSION_BLOCK_SIZE, SESSION_DTYPE, SESSION_KV_CACHE_MEMORY_BYTES, SESSION_MAX_MODEL_LEN

from cli_runner import run_json

pytestmark = pytest.mark.vllm


def engine_args(vllm_server) -> list[str]:
    """`servesize memory` arguments for the served model and flags (the GPU is a stand-in: the CPU
    build takes its KV memory as given)."""
    return [vllm_server.config.model, "--gpus", "1xH100", "--device", "cpu", "--dtype", SESSION_DTYPE,
            "--kv-cache-memory-bytes", str(SESSION_KV_CACHE_MEMORY_BYTES), "--block-size", str(SESSION_BLOCK_SIZE),
            "--max-model-len", str(SESSION_MAX_MODEL_LEN), "--vllm-version", vllm_server_version(vllm_server)]


def predicted(capsys, vllm_server) -> dict:
    return run_json(capsys, "memory", *engine_args(vllm_server), "--json")


def vllm_server_version(vllm_server) -> str:
    import re

    m = re.search(r"vLLM API server version (\S+)", vllm_server.log_text()) or re.search(r"\(v(\d+\.\d+\.\d+)", vllm_server.log_text())
    return m.group(1) if m else "0.32.0"


def test_servesize_memory_predicts_the_engines_logged_kv_lines_exactly(capsys, vllm_server):
    doc = predicted(capsys, vllm_server)
    assert doc["kv_cache_tokens"] == vllm_server.logged_kv_cache_tokens()
    L, conc = vllm_server.logged_max_concurrency()
    assert (doc["max_model_len"], doc["max_concurrency"]) == (L, conc)
    assert [line for line in doc["log_lines"] if line in vllm_server.log_text()], doc["log_lines"]


def test_measure_pool_recovers_the_engines_pool_within_one_block(capsys, tmp_path, vllm_server):
    pred = predicted(capsys, vllm_server)
    doc = run_json(capsys, "measure", "pool", "--url", vllm_server.base_url, "--prompt-tokens", 1024, "--rounds", 2,
                   "--predict", " ".join(engine_args(vllm_server)), "--record", tmp_path / "pool.jsonl", "--quiet", "--json")
    engine_pool = pred["num_blocks"] * SESSION_BLOCK_SIZE  # 1,024 blocks x 32 = 32,768 tokens
    assert doc["pool_tokens"]["resolution"] == "block"
    assert doc["signal"] in ("cached_tokens", "metrics")
    # kept warm: the pool less the null block and the in-flight request's partial block
    assert abs(doc["pool_tokens"]["low"] - (engine_pool - 2 * SESSION_BLOCK_SIZE)) <= SESSION_BLOCK_SIZE, doc["pool_tokens"]
    assert abs(doc["pool_tokens"]["engine_pool_implied"] - engine_pool) <= SESSION_BLOCK_SIZE, doc["pool_tokens"]
    # the engine's own figure and servesize's prediction are reported beside the measurement
    assert doc["engine"]["tokens"] == engine_pool
    assert doc["prediction"]["tokens"] == pred["usable_kv_tokens"]
    assert (tmp_path / "pool.jsonl").read_text().count("\n") >= 2


def test_measure_sessions_runs_a_short_ladder_on_the_real_engine_with_plans_predictions(capsys, tmp_path, vllm_server):
    workload = ["--median", "600", "--sigma", "0.3", "--prefix", "128", "--subagent-median", "300",
                "--subagent-prefix", "64", "--think-time", "0.5", "--output-tokens", "8"]
    doc = run_json(capsys, "measure", "sessions", "--url", vllm_server.base_url, "--users", "2,4", *workload,
                   "--turn-tokens", 64, "--max-model-len", 2048, "--duration", 8, "--record", tmp_path / "s.jsonl",
                   "--predict", " ".join(engine_args(vllm_server) + workload), "--json")
    assert len(doc["rungs"]) >= 1
    assert doc["rungs"][0]["requests"] > 0
    assert doc["verdicts"], "plan's predictions are judged against the ladder"


def test_measure_server_gives_pool_ladder_and_predictions_in_one_command(capsys, tmp_path, vllm_server):
    workload = ["--median", "600", "--sigma", "0.3", "--prefix", "128", "--subagent-median", "300",
                "--subagent-prefix", "64", "--think-time", "0.5", "--output-tokens", "8"]
    doc = run_json(capsys, "measure", "server", "--url", vllm_server.base_url, "--predict", " ".join(engine_args(vllm_server)),
                   *workload, "--turn-tokens", 64, "--max-model-len", 2048, "--duration", 3, "--users", "4,8",
                   "--prompt-tokens", 1024, "--rounds", 2, "--record-dir", tmp_path, "--quiet", "--json")
    assert doc["pool"]["pool_tokens"]["engine_pool_implied"] == doc["pool"]["engine"]["tokens"]
    assert doc["pool"]["prediction"]["tokens"] is not None
    assert [r["users"] for r in doc["sessions"]["rungs"]] == [4, 8]
    assert doc["sessions"]["verdicts"]
    assert (tmp_path / "pool.jsonl").exists() and (tmp_path / "sessions.jsonl").exists()
