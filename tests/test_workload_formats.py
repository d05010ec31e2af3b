"""workload/formats.py: one home for request-log and trace formats. ``workload fit`` (workload/readers.py) and
``simulate`` (simulate/traces.py) detect a file's format in one place, read the same records from it and fit the
same workload; every kind of file is streamed, with memory that follows the records kept, not the file."""

from __future__ import annotations

import csv
import gzip
import json
import tracemalloc

import numpy as np
import pytest

import servesize.workload.formats as formats
from servesize.api import fit_workload, simulation_workload
from servesize.errors import BadInput
from servesize.simulate.replay import ReplayOptions
from servesize.simulate.traces import read_trace
from servesize.workload.readers import read_token_counts


def _lognormal(rng, n, median):
    return [int(x) for x in rng.lognormal(np.log(median), 0.6, n).clip(1, 10**6)]


def _claude_code(path, rng):
    rows = []
    for s in range(15):
        reqs, ids, t = [], list(range(8)), 0.0
        for _ in range(6):
            ids = ids + [1000 * (s + 1) + len(ids) + j for j in range(int(rng.integers(5, 40)))]
            reqs.append({"t": t, "type": "n", "in": 64 * len(ids), "out": int(rng.integers(20, 400)),
                         "hash_ids": list(ids), "api_time": 2.0})
            t += 2.0 + float(rng.lognormal(np.log(10.0), 0.8))
        rows.append({"id": f"s{s}", "block_size": 64, "hash_id_scope": "local", "tool_tokens": 400,
                     "system_tokens": 112, "requests": reqs})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _mooncake(path, rng):
    rows = []
    for i, n in enumerate(_lognormal(rng, 80, 6000)):
        blocks = -(-n // formats.MOONCAKE_BLOCK_TOKENS)
        ids = [0, 1][:blocks] + [100 + 50 * i + j for j in range(max(0, blocks - 2))]  # two leading blocks shared
        rows.append({"timestamp": 1000 * i, "input_length": n, "output_length": int(rng.integers(10, 500)), "hash_ids": ids})
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))


def _openai_records(rng):
    prompts = _lognormal(rng, 60, 9000)
    return [{"session_id": f"u{i % 7}", "usage": {"prompt_tokens": p, "completion_tokens": 50 + i,
                                                  "prompt_tokens_details": {"cached_tokens": p // 3 if i % 2 else 0}}}
            for i, p in enumerate(prompts)]


def _openai_jsonl(path, rng):
    path.write_text("".join(json.dumps(r) + "\n" for r in _openai_records(rng)))


def _openai_array(path, rng):
    path.write_text(json.dumps(_openai_records(rng), indent=1))


WRITERS = {"claude-code": (_claude_code, "cc.jsonl"), "mooncake": (_mooncake, "mc.jsonl.gz"),
           "openai": (_openai_jsonl, "oa.jsonl"), "openai-array": (_openai_array, "oa.json")}


@pytest.mark.parametrize("kind", sorted(WRITERS))
def test_workload_fit_and_simulate_read_the_same_records_and_fit_the_same_workload(kind, tmp_path):
    write, name = WRITERS[kind]
    path = tmp_path / name
    write(path, np.random.default_rng(7))
    obs = read_token_counts(path)
    trace = read_trace(path)
    assert obs.format == trace.format == kind.removesuffix("-array")  # one detection
    # the same requests, the same prompt lengths, in file order (simulate's main requests are workload fit's users)
    assert list(obs.user) == trace.input_tokens[~trace.subagent].astype(float).tolist()
    fit = fit_workload(path)
    found = simulation_workload(str(path), trace, ReplayOptions())
    assert found.workload == fit.workload and found.workload.user.median_tokens == fit.workload.user.median_tokens
    assert {k: v["value"] for k, v in found.fields.items()} == {k: f.value for k, f in fit.fields.items()}
    assert found.fields["user_median_tokens"]["value"] == pytest.approx(float(np.median(list(obs.user))), rel=0.5)


@pytest.mark.parametrize("name", ["mooncake-conversation.jsonl.gz"])  # the Claude Code trace: test_one_workload.py
def test_the_shipped_traces_are_one_format_to_both_readers_with_the_same_prompt_lengths(traces_dir, name):
    path = traces_dir / name
    obs, trace = read_token_counts(path), read_trace(path)
    assert obs.format == trace.format
    main = trace.input_tokens[~trace.subagent]
    assert len(obs.user) == main.size and float(np.median(np.asarray(obs.user))) == float(np.median(main))


def test_the_mooncake_block_is_declared_once_and_both_readers_use_it():
    import servesize.simulate.traces as traces
    import servesize.workload.readers as readers

    assert formats.MOONCAKE_BLOCK_TOKENS == 512  # kvcache-ai/Mooncake FAST25-release/README.md: 512 tokens per hash id
    assert readers.MOONCAKE_BLOCK_TOKENS is formats.MOONCAKE_BLOCK_TOKENS
    assert traces.MOONCAKE_BLOCK_SIZE is formats.MOONCAKE_BLOCK_TOKENS
    assert not [n for n in vars(traces) if n.startswith("_") and not n.startswith("__") and getattr(readers, n, None) is vars(traces)[n]]


@pytest.mark.parametrize("record, expected", [
    ({"type": "header", "kind": "sessions"}, "measure"),
    ({"requests": [{"in": 5}]}, "claude-code"),
    ({"requests": [{"hash_ids": [1]}]}, "claude-code"),
    ({"response": {"body": {"usage": {"prompt_tokens": 5}}}}, "openai"),
    ({"usage": {"input_tokens": 5}}, "anthropic"),
    ({"input_length": 5, "hash_ids": [1]}, "mooncake"),
    ({"prompt_tokens": 5}, None),
    ([1, 2], None),
])
def test_one_detection_names_each_format(record, expected):
    assert formats.detect(record) == expected


# -- streaming ----------------------------------------------------------------------------------------------

def test_a_json_array_is_read_one_element_at_a_time_across_chunk_boundaries(tmp_path, monkeypatch):
    monkeypatch.setattr(formats, "_CHUNK", 7)  # every number, string and object is cut somewhere
    items = [{"usage": {"prompt_tokens": 1000 + 37 * i}, "note": "x" * (i % 11)} for i in range(60)] + [12345678901, "s"]
    path = tmp_path / "a.json.gz"
    path.write_bytes(gzip.compress(("\n [" + " ,\n".join(json.dumps(x) for x in items) + "]\n ").encode()))
    assert [v for _, v in formats.json_array(path)] == items
    obs = read_token_counts(path)
    assert list(obs.user) == [1000 + 37 * i for i in range(60)] and obs.skipped == 2


@pytest.mark.parametrize("text, why", [("[1, 2", "not valid JSON"), ("[1 2]", "expected ','"), ("[1] x", "after the array"),
                                       ("[" + "[" * 64 + "]" * 64 + "]", "deeper than 64")])
def test_a_broken_json_array_is_refused_in_one_line(text, why, tmp_path):
    path = tmp_path / "a.json"
    path.write_text(text)
    with pytest.raises(BadInput, match=why):
        list(formats.json_array(path))


def test_one_array_element_past_the_record_cap_is_refused_without_holding_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(formats, "MAX_LINE_CHARS", 1000)
    monkeypatch.setattr(formats, "_CHUNK", 256)
    path = tmp_path / "a.json"
    path.write_text(json.dumps([{"usage": {"prompt_tokens": 5}}, {"pad": "x" * 5000}]))
    it = formats.json_array(path)
    assert next(it) == (1, {"usage": {"prompt_tokens": 5}})
    with pytest.raises(BadInput, match="element 2: one element over the 1,000 characters"):
        next(it)


def test_a_csv_log_is_streamed_line_by_line_quoted_newlines_included(tmp_path, monkeypatch):
    path = tmp_path / "log.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["note", "prompt_tokens", "completion_tokens"])
        for i in range(50):
            w.writerow([f"row\n{i}", 100 + i, 7])
    seen: list[int] = []
    lines = formats.text_lines

    def counted(p, what="request log"):
        for line in lines(p, what):
            seen.append(len(line))
            yield line
    monkeypatch.setattr("servesize.workload.readers.text_lines", counted)
    obs = read_token_counts(path)
    assert list(obs.user) == [100 + i for i in range(50)] and list(obs.output) == [7.0] * 50
    assert len(seen) == 1 + 2 * 50 and max(seen) < 40  # read a line at a time (each row spans two lines)


def test_the_columns_a_read_keeps_cost_bytes_per_value_not_a_python_float_each(tmp_path):
    """Per record an OpenAI usage line with cached tokens keeps four values: the prompt (user), the output and the
    (cached, prompt) pair, in array('d') columns of 8 bytes: 32 bytes, at most 36 with array's 1/8 over-allocation,
    and while one column grows its old and new buffers are both held (one more column, 9 bytes): 45 bytes a record
    at the peak. The bound is 64. A list of Python floats keeps 32 bytes per value (a 24-byte float and an 8-byte
    pointer), 128 a record. The peak is compared between n and 2n records, so what does not grow with the file
    (stream buffers, the interpreter's own allocations) cancels."""
    bound = 64

    def peak(n: int) -> int:
        path = tmp_path / f"log{n}.jsonl"
        path.write_text("".join(json.dumps({"usage": {"prompt_tokens": 1000 + i % 9000, "completion_tokens": 1 + i % 500,
                                                       "prompt_tokens_details": {"cached_tokens": i % 700}}}) + "\n"
                                for i in range(n)))
        tracemalloc.start()
        try:
            obs = read_token_counts(path)
            _, top = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert len(obs.user) == len(obs.output) == len(obs.cached_hits) == n
        return top

    n = 20_000
    grown = peak(2 * n) - peak(n)
    assert 0 < grown < bound * n, f"{grown / n:.1f} bytes per record kept"
