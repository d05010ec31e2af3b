"""``servesize simulate``: the command as a function (text, --json, --plot, errors in one line, exit 2)."""

from __future__ import annotations

import json

import pytest
from test_traces import claude_session, req, write_jsonl

from cli_runner import run
from servesize.assumptions import assumption


@pytest.fixture
def sessions_file(tmp_path):
    """Six Claude Code style sessions, each growing over five requests (64-token blocks)."""
    sessions = []
    for s in range(6):
        reqs, ids = [], []
        for k in range(5):
            ids = ids + [100 * s + len(ids) + j for j in range(3)]
            reqs.append(req(10.0 * k, 64 * len(ids) + 10, list(ids), out=20, api_time=1.0))
        sessions.append(claude_session(f"trace_{s}", reqs, tool_tokens=100, system_tokens=28))  # a 2-block prefix
    return write_jsonl(tmp_path / "cc.jsonl", sessions)


def test_the_text_report_states_the_choices_the_pool_and_every_stage(capsys, sessions_file):
    code, out, err = run(capsys, "simulate", sessions_file, "--pool-tokens", 64 * 40, "--quiet")
    assert code == 0, err
    assert "requests main, align t0, warm-up 50%" in out
    assert "pool: 40 blocks x 64 tokens" in out
    for heading in ("unbounded cache, by definition", "LRU token hit rate at every pool size", "bounds at chosen sizes",
                    "exact replay at the pool", "users at 90%"):
        assert heading in out
    assert err == ""


def test_json_is_one_document_with_the_curve_and_the_exact_replay(capsys, sessions_file, tmp_path):
    code, out, err = run(capsys, "simulate", sessions_file, "--pool-tokens", 64 * 40, "--json", "--plot", tmp_path / "c.png",
                         "--curves-for-users", "2,4")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["pool"]["num_blocks"] == 40 and doc["choices"]["align"] == "t0"
    assert 0 < doc["curve"]["unbounded_token_hit_rate"] <= 1
    assert doc["exact"]["service"] == "trace"  # the trace's api_time, no deployment given
    assert [c["label"] for c in doc["curves_for_users"]] == ["2 users", "4 users"]
    assert doc["users"]["users"] >= 0 and doc["session_warmth"]
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and doc["plot"] == str(tmp_path / "c.png")


def test_without_a_pool_there_is_the_curve_alone(capsys, sessions_file):
    code, out, _ = run(capsys, "simulate", sessions_file, "--json", "--quiet", "--no-bounds")
    doc = json.loads(out)
    assert code == 0 and doc["pool"] is None and doc["exact"] is None and doc["users"] is None
    assert doc["curve"]["points"]


def test_a_deployment_gives_the_pool_model_service_times_and_plans_warm_users(capsys, sessions_file):
    code, out, err = run(capsys, "simulate", sessions_file, "llama-3.1-8b", "--gpus", "1xH100", "--kv-cache-memory-bytes", "2GiB",
                         "--max-model-len", "16000", "--json", "--quiet", "--no-bounds")  # 2 GiB starts only shorter lengths
    assert code == 0, err
    doc = json.loads(out)
    assert doc["pool"]["block_size"] == 16 and doc["pool"]["source"].startswith("servesize plan's pool: llama-3.1-8b")
    assert doc["exact"]["service"] == "model"
    assert doc["plan"]["warm_users"]["p50"] >= 0
    # the workload is servesize workload fit's: the prefix is the file's system + tool tokens (28 + 100)
    assert doc["fitted_workload"]["workload"]["user"]["prefix_tokens"] == 128


@pytest.mark.parametrize("argv, message", [
    (["llama-3.1-8b"], "MODEL needs --gpus"),
    (["--gpus", "1xH100"], "--gpus needs MODEL"),
    (["--align", "trace"], "no common clock"),
    (["--warmup", "1.5"], "--warmup"),
    (["--service", "model", "--pool-tokens", "4096"], "give MODEL and --gpus"),
    (["--pool-tokens", "10"], "fewer than two"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, sessions_file, argv, message):
    code, out, err = run(capsys, "simulate", sessions_file, *argv, "--quiet")
    assert code == 2 and out == ""
    # a flag's own range is argparse's refusal ("servesize simulate: argument --warmup: ..."), the rest the command's
    assert err.startswith(("servesize: ", "servesize simulate: ")) and message in err and err.count("\n") == 1


def test_a_file_that_is_not_a_trace_is_exit_2(capsys, tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    code, _, err = run(capsys, "simulate", path)
    assert code == 2 and "servesize:" in err


def test_a_workload_file_is_turned_into_sessions(capsys, tmp_path):
    from servesize.workload.files import save_workload
    from servesize.workload.model import SessionClass, Workload

    path = tmp_path / "w.json"
    save_workload(Workload(user=SessionClass("user", 1500, 0.4, 256), think_time_s=3.0, output_tokens=20,
                           warm_turn_tokens=200), path)
    code, out, err = run(capsys, "simulate", path, "--sessions", 40, "--pool-tokens", 20_000, "--block-size", 16, "--json", "--quiet",
                         "--no-bounds")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["trace"]["format"] == "synthetic" and doc["trace"]["sessions"] == 40


def test_engine_runs_the_scheduler_on_the_deployment_and_sets_plan_beside_it(capsys, sessions_file):
    code, out, err = run(capsys, "simulate", sessions_file, "llama-3.1-8b", "--gpus", "1xH100", "--max-model-len", "16000",
                         "--engine", "--engine-max-users", "8", "--json", "--quiet")
    assert code == 0, err
    doc = json.loads(out)
    eng = doc["engine"]
    assert eng["block_size"] == 16 and eng["max_num_batched_tokens"] >= 2048 and eng["mixed_step"] == assumption("step.mixed")
    found = doc["users_at_slo"]
    assert 1 <= found["users"] <= 8 and found["points"][0]["users"] == 1
    assert doc["plan"]["binding"] in ("cache", "decode", "latency", "saturation")
    assert (doc["disagreement"] is None) == (abs(doc["plan"]["users"] - found["users"]) <= 0.15 * found["users"])
    code, out, err = run(capsys, "simulate", sessions_file, "llama-3.1-8b", "--gpus", "1xH100", "--max-model-len", "16000",
                         "--engine", "--users", "3", "--no-users-search", "--quiet")
    assert code == 0, err
    assert "engine simulator (vLLM V1 scheduler)" in out and "plan for the same workload and pool" in out


def test_engine_without_a_deployment_is_one_line(capsys, sessions_file):
    code, out, err = run(capsys, "simulate", sessions_file, "--engine", "--pool-tokens", "4096")
    assert code == 2 and err.count("\n") == 1 and "--engine prices every step on a deployment" in err


@pytest.fixture
def open_loop_file(tmp_path):
    """300 lone Mooncake requests on one clock, 1-3 blocks of 512 tokens each (no sessions: open loop)."""
    rows = [{"timestamp": 250 * i, "input_length": 512 * (1 + i % 3), "output_length": 16 + 7 * (i % 5),
             "hash_ids": [3 * i + j for j in range(1 + i % 3)]} for i in range(300)]
    return write_jsonl(tmp_path / "mooncake.jsonl", rows)


def test_engine_at_users_on_an_open_loop_trace_reports_plan_beside_it_never_a_fleet_sizing_error(capsys, open_loop_file):
    """Issue 31: `--engine --users 4` on an open-loop trace searched for minutes and then failed with plan's fleet
    sizing ("one replica's cache ceiling is 0 users: no number of replicas serves 4"): --users is the engine's
    load, and plan beside it is one replica's ceilings."""
    code, out, err = run(capsys, "simulate", open_loop_file, "qwen3.6-27b", "--gpus", "1xH200", "--engine", "--users", "4",
                         "--no-users-search", "--json", "--quiet")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["at_users"]["users"] == 4 and doc["plan"]["binding"] in ("cache", "decode", "latency", "saturation")
    # four users send one request per think time and mean response each, and the output says so
    at, think = doc["at_users"], doc["fitted_workload"]["workload"]["think_time_s"]
    assert at["mean_response_s"] > 0
    assert at["scaled_to_per_s"] == pytest.approx(4 / (think + at["mean_response_s"]), rel=0.02)
    note = next(n for n in doc["notes"] if n.startswith("its requests belong to no sessions"))
    assert f"at 4 users {at['scaled_to_per_s']:.3g} requests/s" in note


def test_an_engine_run_past_the_request_bound_is_one_line_before_any_step(capsys, open_loop_file, monkeypatch):
    """Issue 31: an open-loop trace of 10^6 requests ran past every bound. The bound (MAX_ENGINE_REQUESTS, lowered
    here to the fixture's size less one) refuses the run by its request count, naming what to do."""
    import servesize.simulate.engine as engine

    monkeypatch.setattr(engine, "MAX_ENGINE_REQUESTS", 299)
    code, out, err = run(capsys, "simulate", open_loop_file, "qwen3.6-27b", "--gpus", "1xH200", "--engine", "--users", "4",
                         "--quiet")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "300 requests in one engine run, past the simulator's 299" in err and "drop --engine" in err
