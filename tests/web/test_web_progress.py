"""A long request (the fleet search, the ranking of every catalogue model) tells its page where it is: the stage
the library last reported and the seconds since it began (GET /api/progress/JOB, the job named by the page's
X-Servesize-Job header), and stops at its next stage when the page cancels it. Decided from the stages the
library reported and an injected clock, never from how long anything took."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import OrderedDict

import pytest
from aiohttp.test_utils import TestClient, TestServer

import servesize as s
from servesize.model.catalogue import load_catalogue
from servesize.web import fleet_view
from servesize.web.app import make_app
from servesize.web.server import JOBS, MAX_JOBS, Cancelled, Job, Jobs

FLEET = {"models": "qwen3.6-27b", "users": 300, "gpus_from": "H100-SXM,H200-SXM,L40S", "max_gpus": 24}
PLAN = {"model": "qwen3.6-27b", "gpus": "1xH200", "quantization": "fp8", "kv_cache_dtype": "fp8"}


class Clock:
    def __init__(self, *readings: float):
        self.readings = list(readings)

    def __call__(self) -> float:
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]


async def _json(response):
    return response.status, json.loads(await response.text())


def test_a_job_says_its_stage_and_the_seconds_of_the_stage_and_of_the_whole():
    job = Job(Clock(100.0, 102.5, 104.0))   # started at 100, the stage began at 102.5, asked at 104
    job.say("fleet: 12 shapes fit; warm fills, decode and latency per shape...")
    doc = job.to_dict()
    assert doc["stages"] == 1 and doc["state"] == "running"
    assert (doc["elapsed_s"], doc["stage_elapsed_s"]) == (4.0, 1.5)
    assert doc["text"] == "fleet: 12 shapes fit; warm fills, decode and latency per shape... (1.5 s in this stage, 4.0 s in all)"


def test_a_job_whose_page_has_gone_stops_at_its_next_stage():
    gone = [False]
    job = Job(Clock(0.0), lambda: gone[0])
    job.say("one")
    gone[0] = True
    with pytest.raises(Cancelled):
        job.say("two")
    assert job.to_dict()["state"] == "cancelled" and job.stages == 1


def test_the_jobs_are_bounded_and_a_name_that_is_not_one_is_not_kept():
    jobs = Jobs(Clock(0.0))
    for i in range(MAX_JOBS + 5):
        jobs.start(f"j{i}", lambda: False)
    assert jobs.get("j0") is None and jobs.get(f"j{MAX_JOBS + 4}") is not None
    jobs.start("../../etc", lambda: False)
    assert jobs.get("../../etc") is None


def test_a_fleet_search_reports_the_librarys_stages_to_its_page(monkeypatch):
    monkeypatch.setattr(fleet_view, "_SEARCHED", OrderedDict())
    said: list[str] = []
    s.fleet(**FLEET, progress=said.append)

    async def go():
        async with TestClient(TestServer(make_app())) as client:
            fleet = await _json(await client.post("/api/fleet", json=FLEET, headers={"X-Servesize-Job": "fleet1"}))
            return fleet, await _json(await client.get("/api/progress/fleet1")), await _json(
                await client.get("/api/progress/nobody"))

    (status, _), (p_status, progress), (missing, _) = asyncio.run(go())
    assert status == 200 and p_status == 200 and missing == 404
    assert progress["state"] == "done" and progress["stages"] == len(said) >= 2 and progress["stage"] == said[-1]


def held_then_cancelled(app, path: str, body: dict, name: str, reached: threading.Event, release: threading.Event):
    """POST ``path`` as the page does (its job named ``name``), read its progress once the work is held after its
    first stage (``reached``), cancel the request as the page's Cancel does, and release the work (``release``)
    once the job sees its page gone: (the progress read while held, the job at its end)."""

    async def go():
        async with TestClient(TestServer(app)) as client:
            request = asyncio.ensure_future(client.post(path, json=body, headers={"X-Servesize-Job": name}))
            await asyncio.get_running_loop().run_in_executor(None, reached.wait, 120)
            running = await _json(await client.get(f"/api/progress/{name}"))
            request.cancel()   # the page's Cancel: fetch aborted, the connection closed
            await asyncio.sleep(0)
            job = app[JOBS].get(name)
            while not job.gone():
                await asyncio.sleep(0.01)
            release.set()
            while job.state not in ("cancelled", "done"):
                await asyncio.sleep(0.01)
            return running, job.to_dict()

    return asyncio.run(go())


def test_while_a_search_runs_the_page_reads_its_stage_and_a_cancel_stops_it(monkeypatch):
    """The search is held after its first stage; the page reads that stage; the page goes (its Cancel aborts the
    request); released, the search's next stage raises and nothing more is computed."""
    reached, release, after = threading.Event(), threading.Event(), []

    def held(query, progress=None):
        progress("stage one")
        reached.set()
        release.wait(120)
        progress("stage two")
        after.append("computed past the cancel")
        return {}

    monkeypatch.setattr(fleet_view, "fleet_view", held)
    app = make_app()
    app[JOBS] = Jobs(Clock(10.0, 11.0, 13.0))
    (status, running), final = held_then_cancelled(app, "/api/fleet", FLEET, "held", reached, release)
    assert status == 200 and running["stage"] == "stage one" and running["state"] == "running"
    assert running["elapsed_s"] == 3.0 and running["stage_elapsed_s"] == 2.0
    assert final["state"] == "cancelled" and final["stages"] == 1 and after == []


def test_the_ranking_reports_each_model_as_it_starts():
    async def go():
        async with TestClient(TestServer(make_app())) as client:
            rank = await _json(await client.post("/api/frontier", json=PLAN, headers={"X-Servesize-Job": "rank1"}))
            return rank, await _json(await client.get("/api/progress/rank1"))

    (status, doc), (_, progress) = asyncio.run(go())
    models = len(load_catalogue())
    assert status == 200 and progress["state"] == "done" and progress["stages"] == models
    assert progress["stage"].startswith(f"ranking: model {models} of {models} ")


def test_the_engine_check_reports_each_probe_and_answers_with_the_line_the_cli_prints(seed_checked):
    """POST /api/engine-check runs the engine simulator on the page's settings (plan --engine-check): each users
    level it tries is a stage the page reads, and its answer is the plan's own engine check, the CLI's line."""
    async def go():
        async with TestClient(TestServer(make_app())) as client:
            check = await _json(await client.post("/api/engine-check", json=PLAN, headers={"X-Servesize-Job": "eng1"}))
            return check, await _json(await client.get("/api/progress/eng1"))

    (status, doc), (_, progress) = asyncio.run(go())
    assert status == 200 and progress["state"] == "done" and progress["stages"] >= 3
    assert progress["stage"].startswith("engine simulator: ")
    c = seed_checked.engine_check  # check_plan on the same settings, made once (tests/conftest.py)
    assert (doc["engine_users"], doc["agree"], doc["text"], doc["disagreement"]) == (
        c["engine_users"], c["agree"], seed_checked.engine_check_text(), seed_checked.disagreement)
    assert doc["text"].startswith(f"engine check: the engine simulator serves {c['engine_users']:,} users")
    assert doc["command"].startswith("servesize plan qwen3.6-27b ") and doc["command"].endswith(" --engine-check")


def test_an_engine_check_the_page_cancels_stops_at_its_next_probe(monkeypatch):
    reached, release, after = threading.Event(), threading.Event(), []

    def held(req, progress=None):
        progress("engine simulator: 1 users")
        reached.set()
        release.wait(120)
        progress("engine simulator: 2 users")
        after.append("simulated past the cancel")
        return {}

    from servesize.web import views
    monkeypatch.setattr(views, "engine_check_view", held)
    (_, running), final = held_then_cancelled(make_app(), "/api/engine-check", PLAN, "e", reached, release)
    assert running["stage"] == "engine simulator: 1 users"
    assert final["state"] == "cancelled" and final["stages"] == 1 and after == []
