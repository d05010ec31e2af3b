"""The trace readers: every format into one Trace, bad lines counted, ids chained."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from servesize.errors import BadInput
from servesize.simulate.traces import MADE_BLOCK_SIZE, MOONCAKE_BLOCK_SIZE, chain_ids, read_trace


def write_jsonl(path, records, *, gz=False, raw_lines=()):
    text = "\n".join([json.dumps(r) for r in records] + list(raw_lines)) + "\n"
    if gz:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def claude_session(sid, requests, **extra):
    return {"id": sid, "models": ["m"], "block_size": 64, "hash_id_scope": "local", "tool_tokens": 900,
            "system_tokens": 100, "requests": requests, **extra}


def req(t, tokens, ids, out=10, api_time=2.0, kind="n"):
    return {"t": t, "type": kind, "model": "m", "in": tokens, "out": out, "hash_ids": ids, "api_time": api_time}


def test_a_claude_code_session_keeps_times_tokens_service_and_its_subagent_on_the_parents_clock(tmp_path):
    sub = {"t": 30.0, "type": "subagent", "agent_id": "agent_001", "requests": [req(0.0, 130, [50, 51]), req(4.0, 200, [50, 51, 52])],
           "tool_tokens": 10, "system_tokens": 5}
    s = claude_session("trace_1", [req(0.0, 130, [1, 2]), sub, req(40.0, 260, [1, 2, 3, 4])])
    trace = read_trace(write_jsonl(tmp_path / "cc.jsonl.gz", [s], gz=True))
    assert trace.format == "claude-code" and trace.block_size == 64 and trace.clock == "session"
    assert trace.requests == 4 and len(trace.sessions) == 2
    main, subagent = trace.sessions
    assert (subagent.parent, subagent.start_s, subagent.prefix_tokens) == (0, 30.0, 15)
    assert main.prefix_tokens == 1000
    assert trace.t_s.tolist() == [0.0, 0.0, 4.0, 40.0]
    assert trace.subagent.tolist() == [False, True, True, False]
    assert trace.service_s.tolist() == [2.0, 2.0, 2.0, 2.0]
    # chained ids: the first two blocks of the main session's requests are the same two blocks
    first, last = trace.ids_of(0), trace.ids_of(3)
    assert first.tolist() == last[:2].tolist() and len(set(last.tolist())) == 4


def test_ids_local_to_a_session_never_match_another_sessions(tmp_path):
    path = write_jsonl(tmp_path / "cc.jsonl", [claude_session("a", [req(0, 130, [1, 2])]), claude_session("b", [req(0, 130, [1, 2])])])
    trace = read_trace(path)
    assert set(trace.ids_of(0).tolist()).isdisjoint(trace.ids_of(1).tolist())


def test_global_ids_match_across_sessions(tmp_path):
    path = write_jsonl(tmp_path / "cc.jsonl", [claude_session("a", [req(0, 130, [1, 2])], hash_id_scope="global"),
                                               claude_session("b", [req(0, 130, [1, 2])], hash_id_scope="global")])
    trace = read_trace(path)
    assert trace.ids_of(0).tolist() == trace.ids_of(1).tolist()


def test_bad_lines_and_bad_requests_are_counted_with_where_they_are_and_the_rest_is_read(tmp_path):
    good = claude_session("ok", [req(0, 130, [1, 2]), {"t": 1, "in": "many", "hash_ids": [1]}, req(2, 10, [1, 2, 3])])
    path = write_jsonl(tmp_path / "cc.jsonl", [good], raw_lines=['{"id": "torn", "requests": [{"t": 0, "in": 5'])
    trace = read_trace(path)
    r = trace.report
    assert trace.requests == 1
    assert (r.bad_lines, r.bad_requests) == (1, 2)
    assert any("line 2" in e for e in r.examples)
    assert any("requests[2]" in e and "cover more" in e for e in r.examples)


def test_a_gzip_file_cut_short_is_read_up_to_where_it_breaks(tmp_path):
    sessions = [claude_session(f"s{k}", [req(0, 130, [1, 2]), req(5, 200, [1, 2, 3])]) for k in range(200)]
    data = gzip.compress(("\n".join(json.dumps(s) for s in sessions) + "\n").encode())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    trace = read_trace(path)
    assert trace.report.truncated and "read up to there" in trace.report.truncated
    assert 0 < len(trace.sessions) < 200


def test_ids_that_are_not_chained_are_re_hashed_over_their_prefixes():
    # id 7 follows 1 in one request and 2 in another: the same id names two different blocks
    out = np.empty(4, dtype=np.int64)
    assert chain_ids(np.array([1, 7, 2, 7]), np.array([2, 2]), out) == 4  # four distinct prefixes
    assert out[1] != out[3]
    chained = np.empty(4, dtype=np.int64)
    span = chain_ids(np.array([1, 7, 1, 7]), np.array([2, 2]), chained)  # already chained: renumbered, not re-hashed
    assert chained.tolist() == [0, 6, 0, 6] and span == 7


def test_mooncake_lines_are_one_request_each_on_the_traces_clock_in_512_token_blocks(tmp_path):
    path = write_jsonl(tmp_path / "m.jsonl", [{"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 2]},
                                              {"timestamp": 2500, "input_length": 600, "output_length": 5, "hash_ids": [0, 3]}])
    trace = read_trace(path)
    assert (trace.format, trace.block_size, trace.clock) == ("mooncake", MOONCAKE_BLOCK_SIZE, "trace")
    assert trace.t_s.tolist() == [0.0, 2.5]
    assert not trace.has_sessions
    assert trace.ids_of(0)[0] == trace.ids_of(1)[0] and trace.ids_of(0)[1] != trace.ids_of(1)[1]
    assert "512 tokens per hash id assumed" in trace.report.notes[0]


def test_a_coarse_clocks_ticks_are_spread_over_the_tick_in_file_order_and_a_fine_clock_is_kept(tmp_path):
    # three ticks ~3 s apart (the conversation trace's clock jitters by a few ms), three requests on each
    stamps = [0, 0, 0, 2_998, 2_998, 2_998, 6_001, 6_001, 6_001]
    recs = [{"timestamp": t, "input_length": 600, "output_length": 5, "hash_ids": [k, 100 + k]} for k, t in enumerate(stamps)]
    trace = read_trace(write_jsonl(tmp_path / "ticks.jsonl", recs))
    t = trace.t_s
    assert np.all(np.diff(t) >= 0)                                   # the file's order kept
    assert len(set(t.tolist())) == 9                                 # no two at one instant
    ticks = np.asarray(stamps) / 1000.0
    width = np.array([2.998] * 3 + [3.003] * 3 + [3.0005] * 3)       # to the next tick; the median step after the last
    assert np.all(t >= ticks) and np.all(t < ticks + width)
    assert "3,000 ms clock (9 requests on 3 ticks" in trace.report.notes[-1]
    assert read_trace(write_jsonl(tmp_path / "again.jsonl", recs)).t_s.tolist() == t.tolist()  # seeded: the same file, the same times
    # each request its own timestamp (the synthetic trace's clock): kept as written
    fine = [{**r, "timestamp": 1_000 * k + (7 if k % 2 else 0)} for k, r in enumerate(recs)]
    assert read_trace(write_jsonl(tmp_path / "fine.jsonl", fine)).t_s.tolist() == [r["timestamp"] / 1000 for r in fine]


def test_a_hash_line_with_its_own_block_size_is_read_in_that_size(tmp_path):
    path = write_jsonl(tmp_path / "h.jsonl", [{"block_size": 64, "hash_ids": ["a", "b"], "input_length": 128}])
    trace = read_trace(path)
    assert trace.block_size == 64 and trace.ids_of(0).size == 2 and not trace.report.notes


def test_an_openai_log_makes_append_only_sessions_and_keeps_the_servers_cached_tokens(tmp_path):
    usage = lambda p, c: {"prompt_tokens": p, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": c}}  # noqa: E731
    path = write_jsonl(tmp_path / "o.jsonl", [{"user": "u1", "created": 100, "usage": usage(100, 0)},
                                              {"user": "u2", "created": 101, "usage": usage(40, 0)},
                                              {"user": "u1", "created": 105, "usage": usage(150, 96)}])
    trace = read_trace(path)
    assert trace.format == "openai" and trace.block_size == MADE_BLOCK_SIZE
    assert len(trace.sessions) == 2
    a, c = trace.ids_of(0), trace.ids_of(2)
    shared = 100 // MADE_BLOCK_SIZE  # the full blocks of u1's previous prompt
    assert c[:shared].tolist() == a[:shared].tolist() and c[shared] != a[shared]
    assert trace.observed_cached_tokens.tolist() == [0.0, 0.0, 96.0]
    assert trace.t_s.tolist() == [100.0, 101.0, 105.0]


def measure_record(tmp_path, requests, kind="sessions"):
    lines = [{"type": "header", "kind": kind, "version": 1, "params": {}}, {"type": "info", "tokens_per_word": 1.0}]
    for rung, session, turn, prompt, salted, ok in requests:
        tags = {"rung": rung, "session": session, "turn": turn, "kind": "user", "salted": salted, "returning": turn > 0,
                "prefix_tokens": 40, "reusable_tokens": 0}
        result = {"id": f"{session}-{turn}", "tags": tags, "t_sent_ns": 10**9 * (turn + 10 * rung), "prompt_tokens": prompt,
                  "cached_tokens": 0, "completion_tokens": 4, "end_s": 0.5, "ok": ok, "error": None if ok else {"type": "x"}}
        lines.append({"type": "request", "rung": rung, "users": 1, "result": result})
    return write_jsonl(tmp_path / "rec.jsonl", lines)


def test_a_measure_sessions_record_rebuilds_each_sessions_growing_prompt_after_the_shared_prefix(tmp_path):
    path = measure_record(tmp_path, [(0, "r0u0s1", 0, 100, False, True), (0, "r0u1s1", 0, 90, False, True),
                                     (0, "r0u0s1", 1, 180, False, True), (0, "r0u0s1", 2, 260, True, True),
                                     (0, "r0u0s1", 3, 300, False, False)])
    trace = read_trace(path)
    assert trace.format == "measure" and trace.requests == 4
    assert trace.report.skipped == {"failed requests (the engine computed nothing to cache)": 1}
    u0, u1, grown, salted = (trace.ids_of(i) for i in range(4))
    prefix = 40 // MADE_BLOCK_SIZE
    assert u0[:prefix].tolist() == u1[:prefix].tolist() and u0[prefix] != u1[prefix]  # the class prefix is shared
    assert grown[: 100 // MADE_BLOCK_SIZE].tolist() == u0[: 100 // MADE_BLOCK_SIZE].tolist()
    assert set(salted.tolist()).isdisjoint(grown.tolist())  # salted at the front: matches nothing
    assert trace.t_s.tolist() == [0.0, 0.0, 1.0, 2.0] and trace.service_s.tolist() == [0.5] * 4


def test_a_measure_pool_record_is_refused_in_one_line(tmp_path):
    with pytest.raises(BadInput, match="holds probes, not sessions"):
        read_trace(measure_record(tmp_path, [], kind="pool"))


@pytest.mark.parametrize("content, message", [
    ("", "holds no records"),
    ('{"something": 1}\n', "not a trace servesize can replay"),
    ("[1, 2]\n", "expected"),
])
def test_a_file_that_is_no_trace_is_one_clear_error(tmp_path, content, message):
    path = tmp_path / "x.jsonl"
    path.write_text(content)
    with pytest.raises(BadInput, match=message):
        read_trace(path)


def test_a_missing_file_is_one_clear_error(tmp_path):
    with pytest.raises(BadInput, match="cannot read"):
        read_trace(tmp_path / "absent.jsonl")


def test_the_fitter_and_the_replay_read_a_claude_code_session_by_one_walk(tmp_path):
    """workload fit and simulate read the same requests of a session, and the same ones as a subagent's, nested
    subagents included (formats.claude_entries); an unreadable subagent entry is counted with its requests."""
    from servesize.workload.readers import read_token_counts

    inner = {"t": 1.0, "type": "subagent", "agent_id": "inner", "requests": [req(0.0, 70, [90])]}
    outer = {"t": 5.0, "type": "subagent", "agent_id": "outer", "requests": [req(0.0, 130, [50, 51]), inner]}
    path = write_jsonl(tmp_path / "cc.jsonl", [claude_session("s1", [req(0.0, 100, [1, 2]), outer,
                                                                      req(9.0, 300, [1, 2, 3, 4])])])
    trace, obs = read_trace(path), read_token_counts(path)
    assert trace.input_tokens.tolist() == [100, 130, 70, 300]
    assert trace.subagent.tolist() == [False, True, True, False]
    assert [s.key for s in trace.sessions] == ["s1", "s1/outer", "s1/outer/inner"]
    assert [s.parent for s in trace.sessions] == [-1, 0, 1]
    assert list(obs.user) == [100, 300] and list(obs.subagent) == [130, 70]

    bad = {"t": "soon", "type": "subagent", "requests": [req(0.0, 130, [50, 51])]}
    path = write_jsonl(tmp_path / "bad.jsonl", [claude_session("s2", [req(0.0, 100, [1, 2]), bad])])
    report = read_trace(path).report
    assert report.bad_requests == 2 and report.examples[-1].startswith("line 1 (s2), requests[1].requests[0]")
