"""measure sessions --workers: one ladder spread over Ray worker processes gives the rung outcomes of one process.

Every outcome compared here is decided by arithmetic over the seeded sessions and the test server's block
cache, not by how the users' requests interleave (which differs between one process and three): the
ladder is 1, 2 and 3 users of 3 requests each, with a seed chosen so that

- on the rungs of 1 and 2 users every session is short: the three users' prompts together hold fewer
  blocks than the pool, so nothing is ever evicted and every returning request hits (warm, in any order);
- on the rung of 3 users every session is longer than the pool: admitting any of its prompts evicts that
  prompt's own first blocks (LRU), so after the first one no request finds even the shared prefix's first
  block and every returning request misses (cold, in any order).

The server's own log is the ground truth the test checks that arithmetic against. A worker is killed by
``WorkerFault``: it exits (os._exit) after completing a given number of its requests in a given rung.
Ray is started once for the module (about 10 s) and shared by every run in it.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
from collections import Counter

import pytest
from testserver import ServerConfig, TestServer

ray = pytest.importorskip("ray")

from servesize.cli import main  # noqa: E402
from servesize.measure.client import RequestResult  # noqa: E402
from servesize.measure.distributed import RayWorkers, WorkerFault, partition  # noqa: E402
from servesize.measure.record import RunRecord, read_record  # noqa: E402
from servesize.measure.sessions import (  # noqa: E402
    ClassParams,
    SessionGenerator,
    SessionParams,
    SessionsConfig,
    is_warm_hit,
    measure_sessions,
)

LADDER_USERS = [1, 2, 3]
WARM_RUNGS = 2  # the first two rungs are short sessions, the last long ones
REQUESTS = 3  # per user per rung: turns 0, 1, 2 of one session
BLOCK, POOL, CAP = 16, 1024, 8000  # the test server's block size, pool (tokens) and max_model_len
PREFIX, TURN, OUT = 100, 50, 2


def _params(seed: int) -> SessionParams:
    return SessionParams(user=ClassParams(500, 2.0, PREFIX), subagent=None, subagent_ratio=0.0, invalidation=0.0,
                         max_model_len=CAP, think_time_s=0.0, output_tokens=OUT, turn_tokens=TURN, seed=seed)


def _turns(p: SessionParams, rung: int, user: int):
    gen = SessionGenerator(p, rung=rung, user=user, nonce=0, tokens_per_word=1.0)
    return [gen.next() for _ in range(REQUESTS)]


def _decided_by_arithmetic(p: SessionParams) -> bool:
    """The ladder's warmth follows from the prompts' lengths alone (the module docstring), checked on the
    generator's own prompts (the test server counts one token a word)."""
    blocks = 0
    for i, users in enumerate(LADDER_USERS):
        for u in range(users):
            ts = _turns(p, i, u)
            if len({t.session for t in ts}) != 1:
                return False
            if i < WARM_RUNGS:
                blocks += math.ceil(len(ts[-1].words) / BLOCK)
            elif not (len(ts[0].words) > POOL + BLOCK and len(ts[-1].words) + OUT <= CAP):
                return False
    return blocks <= POOL // BLOCK


def _seed() -> int:
    """The first seed whose ladder is decided by arithmetic. A session's first length is the generator's first
    draw, exp(ln median + sigma z) with z its rng's first gauss: a cheap screen, then the generator decides."""
    for seed in range(100_000):
        zs = [[random.Random(f"{seed}/{i}/{u}").gauss(0.0, 1.0) for u in range(n)] for i, n in enumerate(LADDER_USERS)]
        lengths = [[500 * math.exp(2.0 * z) for z in row] for row in zs]
        if all(x < 240 for row in lengths[:WARM_RUNGS] for x in row) and all(1100 < x < 7800 for x in lengths[-1]) \
                and _decided_by_arithmetic(_params(seed)):
            return seed
    raise AssertionError("no seed decides the ladder by arithmetic")


SEED = _seed()


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    import logging

    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    yield
    ray.shutdown()


def _config(url: str, **kw) -> SessionsConfig:
    return SessionsConfig(url=url, params=_params(SEED), users=LADDER_USERS, duration_s=600, requests_per_user=REQUESTS,
                          predicted_users=2, **kw)


def _server() -> TestServer:
    return TestServer(ServerConfig(capacity_tokens=POOL, block_size=BLOCK, max_model_len=CAP, ttft_per_token_s=0.0,
                                   itl_s=0.001))


def _run(path, workers: RayWorkers | None, *, resume: bool = False):
    """One run (or a resume) of the ladder into the record at ``path``, on a fresh server: (result, server log,
    completions the server received)."""
    with _server() as server:
        if resume:
            record, contents = RunRecord.resume(path, "sessions")
        else:
            record, contents = RunRecord.create(path, "sessions", _config(server.url).to_params()), None
        try:
            result = asyncio.run(measure_sessions(_config(server.url), record=record, resume=contents, workers=workers))
        finally:
            record.close()
        return result, list(server.log), server.completions


def _outcomes(result) -> list[tuple]:
    return [(g.users, g.requests, g.errors, g.returning, g.warm_hits, g.warm_hit_rate, g.signal, g.state(result.warm_target))
            for g in result.rungs]


def _requests(path) -> list[dict]:
    return read_record(path, "sessions").of_type("request")


def _per_request(path) -> Counter:
    """(users, user, session, turn, warm) of every request the record holds, counted: one of each, or a duplicate."""
    out: Counter = Counter()
    for e in _requests(path):
        r = RequestResult.from_dict(e["result"])
        t = r.tags
        out[(e["users"], t["user"], t["session"], t["turn"], is_warm_hit(r, server_reports_cached=True))] += 1
    return out


def _expected_sessions() -> set[tuple]:
    """Every (users, user, session, turn) the ladder sends, from the generator."""
    p = _params(SEED)
    return {(users, u, t.session, t.turn) for i, users in enumerate(LADDER_USERS) for u in range(users) for t in _turns(p, i, u)}


def test_users_are_spread_sticky_by_user_number():
    assert partition(7, 3) == [[0, 3, 6], [1, 4], [2, 5]]
    assert partition(2, 3) == [[0], [1], []]
    assert sorted(u for share in partition(100, 7) for u in share) == list(range(100))


def test_one_worker_and_three_give_the_same_rungs_knee_verdict_and_requests(tmp_path):
    runs = {n: _run(tmp_path / f"w{n}.jsonl", RayWorkers(n) if n else None) for n in (0, 1, 3)}
    # the arithmetic the ladder was chosen for, on the server's own log of the in-process run
    _, log, served = runs[0]
    assert served == REQUESTS * sum(LADDER_USERS)
    first_rungs = REQUESTS * sum(LADDER_USERS[:WARM_RUNGS])
    assert all(e["cached_tokens"] == 0 for e in log[first_rungs + 1:])  # the long rung: nothing hits
    assert sum(e["cached_tokens"] > 0 for e in log[:first_rungs]) >= (REQUESTS - 1) * sum(LADDER_USERS[:WARM_RUNGS])
    base = runs[0][0]
    assert _outcomes(base) == [(1, 3, 0, 2, 2, 1.0, "cached_tokens", "warm"), (2, 6, 0, 4, 4, 1.0, "cached_tokens", "warm"),
                               (3, 9, 0, 6, 0, 0.0, "cached_tokens", "below")]
    assert base.knee == {"warm_users": 2, "cold_users": 3, "inconclusive_users": None}
    for n in (1, 3):
        r, _, served = runs[n]
        assert served == REQUESTS * sum(LADDER_USERS)
        assert _outcomes(r) == _outcomes(base) and r.knee == base.knee and r.exit_code == 0
        assert [v["line"] for v in r.verdicts] == [v["line"] for v in base.verdicts]
    # one record each: every session's every turn once, classified the same way whichever process ran it
    per = {n: _per_request(tmp_path / f"w{n}.jsonl") for n in (0, 1, 3)}
    for n in (0, 1, 3):
        assert max(per[n].values()) == 1  # no duplicate
        assert {k[:4] for k in per[n]} == _expected_sessions()  # none missing, none extra
        assert per[n] == per[0]


def test_each_request_names_its_worker_and_each_worker_its_clock_offset(tmp_path):
    path = tmp_path / "w3.jsonl"
    _run(path, RayWorkers(3))
    contents = read_record(path, "sessions")
    assert all(e["worker"] == e["result"]["tags"]["user"] % 3 for e in contents.of_type("request"))
    joined = contents.of_type("workers_joined")[0]["workers"]
    assert [w["worker"] for w in joined] == [0, 1, 2] and len({w["pid"] for w in joined}) == 3
    events = contents.of_type("workers")
    assert [(e["users"], [w["worker"] for w in e["workers"]]) for e in events] == [(1, [0]), (2, [0, 1]), (3, [0, 1, 2])]
    for e in events:
        for w in e["workers"]:
            assert w["requests"] == REQUESTS * len(w["users"]) and "died" not in w
            # one machine, one clock: the worker read it between the coordinator's send and receive, so the offset
            # is within half the round trip (the monotonic clock exactly; the wall clock may be slewed by NTP)
            assert abs(w["mono_offset_ns"]) <= w["rtt_s"] * 1e9 / 2 + 1
            assert abs(w["wall_offset_s"]) <= w["uncertainty_s"] + 1e-3


def test_a_worker_killed_mid_rung_fails_that_rung_and_resume_measures_it_again(tmp_path):
    path = tmp_path / "k.jsonl"
    # worker 1 runs user 1 of the 2-user rung (index 1) and exits once its first request has completed
    r, _, served = _run(path, RayWorkers(3, fault=WorkerFault(worker=1, rung=1, after=1)))
    assert served == 3 + 3 + 1  # rung 1: 3; rung 2: user 0's 3 (worker 0), user 1's first before its worker died
    assert [(g.users, g.status) for g in r.rungs] == [(1, "measured"), (2, "failed")]
    assert r.rungs[1].stop.startswith("worker 1 (") and "died mid-rung" in r.rungs[1].stop
    assert r.exit_code == 2 and r.failure.startswith("the 2-user rung failed (worker 1")
    assert r.knee == {"warm_users": 1, "cold_users": None, "inconclusive_users": 2}  # never warm from partial data
    contents = read_record(path, "sessions")
    assert [e["users"] for e in contents.of_type("rung")] == [1]
    assert [e["users"] for e in contents.of_type("rung_failed")] == [2]
    died = [w for w in contents.of_type("workers")[-1]["workers"] if "died" in w]
    assert [(w["worker"], w["users"], w["requests"]) for w in died] == [(1, [1], 0)]
    # the surviving worker's requests are kept, marked as the failed attempt's
    assert Counter((e["users"], e["attempt"]) for e in contents.of_type("request")) == {(1, 1): 3, (2, 1): 3}

    r, _, served = _run(path, RayWorkers(3), resume=True)
    assert served == REQUESTS * (2 + 3)  # the failed rung and the one above it; the measured rung is not sent again
    assert r.exit_code == 0 and [(g.users, g.status) for g in r.rungs] == [(1, "measured"), (2, "measured"), (3, "measured")]
    assert r.knee == {"warm_users": 2, "cold_users": 3, "inconclusive_users": None}
    contents = read_record(path, "sessions")
    assert sorted(e["users"] for e in contents.of_type("rung")) == [1, 2, 3]  # each rung complete once
    attempts = Counter((e["users"], e["attempt"]) for e in contents.of_type("request"))
    assert attempts == {(1, 1): 3, (2, 1): 3, (2, 2): 6, (3, 1): 9}
    measured = {(e["users"], e["attempt"]) for e in contents.of_type("rung")}
    kept = [(e["users"], e["result"]["tags"]["user"], e["result"]["tags"]["turn"]) for e in contents.of_type("request")
            if (e["users"], e["attempt"]) in {(u, a) for u, a in measured}]
    assert len(kept) == len(set(kept)) == REQUESTS * sum(LADDER_USERS)


def test_the_cli_spreads_a_ladder_over_workers(tmp_path, capsys):
    rec = tmp_path / "c.jsonl"
    with _server() as server:
        code = main(["measure", "sessions", "--url", server.url, "--users", "1,2", "--requests-per-user", "2", "--median", "300",
                     "--prefix", "100", "--think-time", "0.02", "--output-tokens", "2", "--turn-tokens", "50",
                     "--max-model-len", str(CAP), "--subagent-ratio", "0", "--workers", "2", "--record", str(rec),
                     "--json", "--quiet"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    out = json.loads(captured.out)
    assert [g["requests"] for g in out["rungs"]] == [2, 4]
    assert any("2 workers" in n for n in out["notes"])
    assert sorted({e["worker"] for e in _requests(rec)}) == [0, 1]


def test_ray_address_without_workers_is_refused_in_one_line(capsys):
    code = main(["measure", "sessions", "--url", "http://127.0.0.1:9", "--users", "1", "--ray-address", "127.0.0.1:6379"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("servesize: --ray-address needs --workers") and err.count("\n") == 1


def test_sigterm_mid_rung_keeps_what_the_workers_completed_and_resume_measures_the_rung_again(tmp_path, capsys):
    import os
    import pathlib
    import signal
    import subprocess
    import sys
    import time

    rec = tmp_path / "t.jsonl"
    flags = ["--users", "2", "--requests-per-user", "15", "--median", "300", "--prefix", "100", "--think-time", "0.05",
             "--output-tokens", "4", "--turn-tokens", "50", "--max-model-len", str(CAP), "--subagent-ratio", "0", "--quiet"]
    src = pathlib.Path(__file__).resolve().parents[2] / "src"
    with TestServer(ServerConfig(itl_s=0.05)) as server:
        env = dict(os.environ, PYTHONPATH=str(src))
        p = subprocess.Popen([sys.executable, "-m", "servesize", "measure", "sessions", "--url", server.url, *flags,
                              "--workers", "2", "--record", str(rec)], env=env, stderr=subprocess.PIPE, text=True)
        try:
            while server.completions < 10 and p.poll() is None:
                time.sleep(0.1)
            p.send_signal(signal.SIGTERM)
            _, err = p.communicate(timeout=120)
        finally:
            if p.poll() is None:
                p.kill()
        # each user has at most one request in flight: of the 10 the server had received, 8 or more had completed
        assert p.returncode == 143 and err.startswith("servesize: terminated (SIGTERM)") and err.count("\n") == 1, err
        contents = read_record(rec, "sessions")
        kept = contents.of_type("request")
        assert len(kept) >= 8 and len({e["result"]["id"] for e in kept}) == len(kept) <= server.completions
        assert contents.of_type("interrupted")[0]["signal"] == "SIGTERM" and not contents.of_type("rung")
        server.config.itl_s = 0.0  # slow tokens kept the rung running until the signal came; the resume need not wait
        code = main(["measure", "sessions", "--resume", str(rec), "--url", server.url, "--workers", "2", "--quiet"])
    assert code == 0, capsys.readouterr().err
    contents = read_record(rec, "sessions")
    assert [e["users"] for e in contents.of_type("rung")] == [2]
    attempts = Counter(e["attempt"] for e in contents.of_type("request"))
    assert attempts == {1: len(kept), 2: 2 * 15}  # the rung measured again, whole, as a new attempt


def test_workers_against_two_endpoints_give_the_in_process_per_endpoint_counts(tmp_path):
    from test_endpoints import _check_against_each_server, _fleet

    for routing in ("sticky", "per-request"):
        alone, _ = _fleet(routing, tmp_path / f"{routing}-1.jsonl")
        spread, servers = _fleet(routing, tmp_path / f"{routing}-2.jsonl", workers=RayWorkers(2))
        keys = ("requests", "users", "returning", "warm_hits", "warm_hit_rate")  # each run has its own two servers
        assert [{k: e[k] for k in keys} for e in spread.rungs[0].endpoints] == \
            [{k: e[k] for k in keys} for e in alone.rungs[0].endpoints]
        _check_against_each_server(spread, servers, tmp_path / f"{routing}-2.jsonl")


class SilentDeadline:
    """A clock for a rung's deadline (``RayWorkers(wait_shares=...)``) on which time jumps to the deadline as soon as
    every share but the ``silent`` worker's has answered: the real clock would get there by waiting, this one does
    not wait. It keeps each deadline it was given and which shares were still unanswered when it passed."""

    def __init__(self, silent: int, settled=None):
        self.silent = silent
        self.settled = settled  # None, or a check that the silent worker has done what it does before going silent
        self.deadlines: list[float] = []
        self.overdue: list[list[int]] = []

    async def __call__(self, tasks: dict, deadline_s: float) -> None:
        self.deadlines.append(deadline_s)
        answering = [t for k, t in tasks.items() if k != self.silent]
        if answering:
            await asyncio.wait(answering)
        for _ in range(SETTLE_POLLS if self.silent in tasks and self.settled is not None else 0):
            if self.settled():  # the silent worker may still be sending (its process starts slower on a loaded
                break  # machine): the deadline passes once it has, as a real one, seconds later, would find it;
            await asyncio.sleep(0.01)  # bounded, so a worker that never sends fails the test, not hangs it
        await asyncio.sleep(0)  # a share that answered with the others is seen as answered
        self.overdue.append(sorted(k for k, t in tasks.items() if not t.done()))


SETTLE_POLLS = 6_000  # 60 s of 10 ms polls: the most the silent worker is waited for before the deadline passes


def test_a_worker_that_goes_silent_mid_rung_fails_that_rung_by_its_deadline_and_is_killed(tmp_path):
    """A partitioned host answers nothing, and Ray raises nothing until its health checks call the node dead:
    worker 1 stays alive but never returns its share of the 2-user rung (a frozen process, SIGSTOP, was tried first:
    Ray on one machine sometimes calls it dead within seconds, sometimes not, so it tested nothing for sure). The
    coordinator waits the rung's duration, one request's --timeout and the grace, then fails the rung and kills the
    worker; it never waits for ever. The deadline is waited on an injected clock (``SilentDeadline``): it passes once
    every other share has answered, so the test decides from what the coordinator did, not from how long it slept."""
    path = tmp_path / "h.jsonl"
    with _server() as server:
        # the deadline passes once the silent worker's user has sent its whole session too: the 1-user rung's 3
        # requests and the 2-user rung's 6
        clock = SilentDeadline(silent=1, settled=lambda: server.completions >= 3 + 3 + 3)
        workers = RayWorkers(3, fault=WorkerFault(worker=1, rung=1, after=1, kind="hang"), share_grace_s=1.0,
                             wait_shares=clock)
        cfg = SessionsConfig(url=server.url, params=_params(SEED), users=LADDER_USERS, duration_s=20.0, timeout_s=5.0,
                             requests_per_user=REQUESTS, predicted_users=2)
        record = RunRecord.create(path, "sessions", cfg.to_params())
        try:
            r = asyncio.run(measure_sessions(cfg, record=record, workers=workers))
        finally:
            record.close()
        served = server.completions
    assert served == 3 + 3 + 3  # the silent worker's user sent its whole session; only the answer never came
    assert clock.deadlines == [20.0 + 5.0 + 1.0] * 2  # each rung's deadline: its duration, --timeout and the grace
    assert clock.overdue == [[], [1]]  # the 1-user rung answered in full; the 2-user rung's worker 1 never did
    assert [(g.users, g.status) for g in r.rungs] == [(1, "measured"), (2, "failed")]
    assert r.rungs[1].stop.startswith("worker 1 (") and "did not answer" in r.rungs[1].stop
    assert "partitioned or hung host" in r.rungs[1].stop and r.exit_code == 2
    assert r.knee == {"warm_users": 1, "cold_users": None, "inconclusive_users": 2}
    silent = [w for w in read_record(path, "sessions").of_type("workers")[-1]["workers"] if "died" in w]
    assert [(w["worker"], w["requests"]) for w in silent] == [(1, 0)]
    assert silent[0]["died"].startswith("ShareOverdue: no answer 26 s after the rung began")
