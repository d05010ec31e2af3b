"""A verdict never stands beside a figure over its limit without a word (#29): every tile the page marks over has
the library's sentence in the verdict (planning.limits.limits_over), which the command line prints too, and a
sentence is never written for a figure within its limit."""

from __future__ import annotations

import pytest

from servesize.api import plan
from servesize.render.text import render_text
from servesize.scenario import Scenario
from servesize.web import views
from servesize.web.requests import plan_request

SEED = {"model": "qwen3.6-27b", "gpus": "1xH200", "quantization": "fp8", "kv_cache_dtype": "fp8"}
TILE_LIMIT = {"ttft_miss": "ttft_miss", "burst": "burst", "decode": "decode", "aggregate": "decode"}


@pytest.mark.parametrize("extra", [{"median": "31k"}, {"median": "60k"}, {"median": "140k"}, {"median": "250k"},
                                   {"median": "180k", "invalidation": "0.01"}, {"median": "31k", "load_users": "120"},
                                   {"median": "31k", "burst": "40"}])
def test_every_tile_over_its_limit_is_named_in_the_verdict_and_no_other(extra):
    view = views.plan_view(plan_request({**SEED, **extra}))
    over = {TILE_LIMIT[t["id"]] for t in view["tiles"] if t["status"] == "over"}
    named = [x["limit"] for x in view["verdict"]["limits"]]
    assert set(named) == over and len(named) == len(set(named))


def test_a_miss_over_the_budget_says_whether_latency_binds_and_the_command_line_prints_it():
    # a 20 tok/s floor keeps decode (14 users) above latency (2), which binds with the cold miss (9.1 s on average)
    # over a 9 s budget (at the 10 s default latency binds at 3 users, where a miss averages under 10 s)
    binding = plan(Scenario(**SEED, median=250_000, decode_floor=20, ttft_limit=9), sensitivity=False)
    (text,) = [x["text"] for x in binding.limits_over() if x["limit"] == "ttft_miss"]
    assert binding.binding == "latency" and "is the one that binds" in text and "over the 9 s budget" in text
    assert f"over its limit: {text}" in render_text(binding).splitlines()


def test_a_burst_over_the_tolerance_says_no_ceiling_counts_it():
    view = views.plan_view(plan_request({**SEED, "burst": "40"}))
    (limit,) = view["verdict"]["limits"]
    assert limit["limit"] == "burst" and "a burst of 40 cold requests" in limit["text"]
    assert "No ceiling counts bursts" in limit["text"]


def test_users_past_the_decode_ceiling_name_the_decode_ceiling():
    view = views.plan_view(plan_request({**SEED, "load_users": "120"}))
    said = dict((x["limit"], x["text"]) for x in view["verdict"]["limits"])
    decode_users = {c["name"]: c["text"] for c in view["verdict"]["ceilings"]}["decode"]
    assert "at 120 users the per-user decode p50" in said["decode"]
    assert f"past the decode ceiling ({decode_users} users)" in said["decode"]
    assert "past the latency ceiling" in said["ttft_miss"] and "grows without bound" in said["ttft_miss"]
    assert "the queue never drains" in said["burst"]
