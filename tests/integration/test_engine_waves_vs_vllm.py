"""Which requests share a step: the real engine beside the engine simulator (issue 28, the lock-step question).

A ``vllm bench serve`` load of exact lengths with ``--ignore-eos`` at a fixed concurrency: C requests sent at once
to an idle vLLM. The real CPU engine prefills the first alone (it reaches the scheduler first, and an idle engine
starts a step with what it has) and the other C - 1 together in the next step; every request of a group then
finishes in one step, the group's replacements are sent together, and the split lasts every wave. The engine
simulator schedules the same groups (``engine.handoff_s`` in data/assumptions.toml: the API server hands requests over one at a time).

This is what the measured fixed-length rows of docs/accuracy.md are compared against: an engine that keeps exact-
length groups in step, so a measured run whose TTFT is below that lock-step floor was not of exact lengths.

The groups are read from when each request's first token arrived; requests of one step get theirs within
milliseconds of each other, and steps are hundreds of milliseconds apart (a wide model in float32: a 256-token
prefill is a long step on a CPU). No timing of this machine is compared, only which requests came together.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from vllm_server import ServerConfig, VllmServer

from servesize.cli import main
from servesize.planning.step_model import ConstantSteps
from servesize.simulate.bench import BenchLoad, bench_replay
from servesize.simulate.engine import EngineConfig, simulate_engine

pytestmark = pytest.mark.vllm

N, INPUT, OUTPUT, C = 16, 256, 4, 4
BLOCK = 32
SAME_STEP_S = 0.1  # first tokens closer than this came from one step (a 256-token prefill step is ~0.3 s here)


def _groups(first_token_s: dict[int, float], apart_s: float) -> list[list[int]]:
    """Requests by the step that gave their first token: sorted by time, a new group where the gap exceeds apart_s."""
    order = sorted(first_token_s, key=first_token_s.get)
    groups: list[list[int]] = []
    last = None
    for i in order:
        if last is None or first_token_s[i] - last > apart_s:
            groups.append([])
        groups[-1].append(i)
        last = first_token_s[i]
    return [sorted(g) for g in groups]


def _measured_groups(record) -> list[list[int]]:
    first = {}
    for line in record.read_text().splitlines():
        rec = json.loads(line)
        if rec["type"] == "request":
            r = rec["result"]
            assert r["ok"] and r["completion_tokens"] == OUTPUT, r
            first[int(r["id"].rsplit("-", 1)[1])] = r["t_sent_ns"] / 1e9 + r["ttft_s"]
    assert sorted(first) == list(range(N))
    return _groups(first, SAME_STEP_S)


def _simulated_groups(load: BenchLoad) -> list[list[int]]:
    # any step model whose prefill takes far longer than the hand-off gives these groups: a 256-token prefill of
    # 0.26 s and 20 ms decode steps, about the CPU engine's
    times = ConstantSteps(prefill_per_token_s=1e-3, decode_step_s=0.02)
    run = simulate_engine(bench_replay(load, BLOCK), EngineConfig(num_blocks=4096, block_size=BLOCK), times,
                          warmup=0.0)
    assert not np.isnan(run.first_token_s).any()
    return _groups(dict(enumerate(run.first_token_s.tolist())), 1e-9)


def test_requests_sent_at_once_are_prefilled_one_then_the_rest_and_keep_those_groups_every_wave(
        vllm_python, wide_model, tmp_path, vllm_log_dir, capsys):
    cfg = ServerConfig(model=wide_model["path"], dtype="float32", kv_cache_memory_bytes=64 * 2**20, block_size=BLOCK,
                       max_model_len=1024, max_num_seqs=8, max_num_batched_tokens=2048, prefix_caching=False)
    load = BenchLoad(random_input_len=INPUT, random_output_len=OUTPUT, num_prompts=N, max_concurrency=C,
                     ignore_eos=True)
    record = tmp_path / "waves.jsonl"
    with VllmServer(python=str(vllm_python), config=cfg, log_path=str(vllm_log_dir / "waves.log")) as srv:
        code = main(["measure", "bench", "--url", srv.base_url, "--random-input-len", str(INPUT),
                     "--random-output-len", str(OUTPUT), "--num-prompts", str(N), "--max-concurrency", str(C),
                     "--ignore-eos", "--record", str(record), "--json", "--quiet"])
    assert code == 0, capsys.readouterr().err

    expected = [g for w in range(N // C) for g in ([w * C], list(range(w * C + 1, (w + 1) * C)))]
    assert _simulated_groups(load) == expected
    # the real engine: however its first wave split (the requests that reached the idle engine before its first
    # step went, usually the first alone, once the first two), every later wave keeps that split, shifted by C
    measured = _measured_groups(record)
    first = [g for g in measured if g[0] < C]
    assert sorted(i for g in first for i in g) == list(range(C))
    assert measured == [[i + w * C for i in g] for w in range(N // C) for g in first]

