"""The simulator against the real engine: a warm-capacity ladder measured on the session's vLLM CPU server
(1,024 blocks of 32 tokens, prefix caching on), then the same requests, read back from the run record,
replayed through the exact simulator with that pool. Per request the simulated cached tokens are the
engine's; per rung the warm-hit rates agree; the knee is the same rung.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from vllm_server import SESSION_BLOCK_SIZE, SESSION_KV_CACHE_MEMORY_BYTES, SESSION_MAX_NUM_SEQS

from servesize.cli import main
from servesize.measure.sessions import RungStats, knee
from servesize.simulate.cache import CacheConfig, RecordedService, replay_exact
from servesize.simulate.replay import ReplayOptions, build_replay
from servesize.simulate.traces import read_trace

pytestmark = pytest.mark.vllm


@dataclass(frozen=True)
class SimulatedRung:
    """A rung as the simulator replays it, judged by measure's own rule (RungStats.state)."""

    users: int
    warm_hit_rate: float
    failed: bool = False

    state = RungStats.state


KV_BYTES_PER_TOKEN = 512  # tests/integration/make_tiny_model.py: 2 layers x 2 KV heads x 32 x 2 x 2 bytes
NUM_BLOCKS = SESSION_KV_CACHE_MEMORY_BYTES // (KV_BYTES_PER_TOKEN * SESSION_BLOCK_SIZE)  # 16 MiB / 16 KiB = 1,024
LADDER = (6, 12, 24, 48)
# sessions of ~1,200 tokens growing 72 per turn: ~45 blocks each, so about 22 users fill the 1,023 usable blocks
WORKLOAD = ["--median", "1200", "--sigma", "0.2", "--prefix", "128", "--subagent-ratio", "0", "--think-time", "1",
            "--output-tokens", "8"]


def _returning(record_path) -> list[dict]:
    """The record's completed requests in file order (the order the trace reader keeps), with their tags."""
    out = []
    for line in record_path.read_text().splitlines():
        e = json.loads(line)
        r = e.get("result") if e.get("type") == "request" else None
        if r is not None and r.get("ok") and isinstance(r.get("prompt_tokens"), int) and r["prompt_tokens"] > 0:
            out.append(r)
    return out


def _warm(cached: float, tags: dict) -> bool:
    """measure sessions' rule: the hit covered the shared prefix and more than half the session's own history."""
    prefix = tags["prefix_tokens"]
    return cached > prefix + 0.5 * max(0, tags["reusable_tokens"] - prefix)


def test_the_exact_simulator_replays_a_measured_ladder_and_finds_the_engines_knee(capsys, tmp_path, vllm_server):
    assert NUM_BLOCKS == 1024
    record = tmp_path / "sessions.jsonl"
    code = main(["measure", "sessions", "--url", vllm_server.base_url, "--users", ",".join(map(str, LADDER)), *WORKLOAD,
                 "--turn-tokens", "64", "--max-model-len", "4096", "--duration", "15", "--seed", "7",
                 "--record", str(record), "--quiet", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    measured = json.loads(out)
    rungs = {g["users"]: g for g in measured["rungs"]}
    assert measured["signal"] == "cached_tokens" and len(rungs) >= 3, measured["notes"]

    trace = read_trace(record)
    replay = build_replay(trace, ReplayOptions(align="trace", warmup=0.0, block_size=SESSION_BLOCK_SIZE))
    sim = replay_exact(replay, CacheConfig(NUM_BLOCKS, SESSION_BLOCK_SIZE, max_num_seqs=SESSION_MAX_NUM_SEQS),
                       RecordedService(replay.service_s))
    cached_of = dict(zip(replay.source.tolist(), sim.hit_tokens.tolist()))
    results = _returning(record)
    failed_returning: dict[int, int] = {}
    for line in record.read_text().splitlines():
        e = json.loads(line)
        r = e.get("result") if e.get("type") == "request" else None
        if r is not None and not r.get("ok") and r["tags"].get("returning"):
            failed_returning[r["tags"]["users"]] = failed_returning.get(r["tags"]["users"], 0) + 1
    assert len(results) == trace.requests

    per_rung: dict[int, list[tuple[bool, bool]]] = {}
    close = returning = 0
    for i, r in enumerate(results):
        tags = r["tags"]
        if not tags.get("returning"):
            continue
        engine = r.get("cached_tokens") or 0  # vLLM leaves the field out at 0
        returning += 1
        close += abs(cached_of[i] - engine) <= SESSION_BLOCK_SIZE
        per_rung.setdefault(tags["users"], []).append((_warm(cached_of[i], tags), _warm(engine, tags)))
    # request by request, the simulated cache serves what the engine served (within one block)
    assert close >= 0.9 * returning, (close, returning)

    simulated = []
    for users, pairs in sorted(per_rung.items()):
        sim_rate = sum(s for s, _ in pairs) / len(pairs)
        engine_rate = sum(e for _, e in pairs) / len(pairs)
        # the same rule as measure's, which counts a returning request that failed (a CPU engine under load can
        # time one out) as a miss; the simulator replays what completed
        lost = failed_returning.get(users, 0)
        assert sum(e for _, e in pairs) / (len(pairs) + lost) == pytest.approx(rungs[users]["warm_hit_rate"], abs=1e-9)
        assert lost == rungs[users]["returning_errors"]
        assert sim_rate == pytest.approx(engine_rate, abs=0.1), (users, sim_rate, engine_rate)
        simulated.append(SimulatedRung(users, sim_rate))
    # the ladder crosses the pool: warm at the bottom, not at the top, and the simulator's knee is the engine's
    assert measured["knee"]["warm_users"] is not None and measured["knee"]["cold_users"] is not None, measured["knee"]
    assert knee(simulated, measured["warm_target"]) == measured["knee"]
