"""Property-based tests (hypothesis) over the harness's inputs: run records, SSE streams, the measure command line.

Properties, for every generated case: no traceback (only servesize's own one-line refusals), exit 0 or 2
from the command line, one line on every error, and every case bounded by the code's own caps (record
and line sizes, SSE line and event sizes, flag ranges); a case also runs under an alarm (``CASE_CAP_S``)
that fails it as a hang, a cap and not a measurement. The seed is fixed (``derandomize``), so CI runs the
same cases every time; ``SERVESIZE_FUZZ_EXAMPLES=10000`` runs that many cases per property instead.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pathlib
import signal
import tempfile
from dataclasses import asdict

import pytest

hypothesis = pytest.importorskip("hypothesis")  # the project's test extra installs it (pyproject: [test])
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from cli_runner import Ran, run_captured  # noqa: E402
from servesize.errors import BadInput  # noqa: E402
from servesize.measure.client import ERROR_TYPES, RequestResult, StreamParser  # noqa: E402
from servesize.measure.metrics import MetricsDelta  # noqa: E402
from servesize.measure.pool import PoolConfig, PoolRun, Verdict  # noqa: E402
from servesize.measure.record import RunRecord, read_record  # noqa: E402
from servesize.measure.sessions import (  # noqa: E402
    ClassParams,
    RungStats,
    SessionParams,
    SessionsConfig,
    SessionsRun,
)

EXAMPLES = int(os.environ.get("SERVESIZE_FUZZ_EXAMPLES", "0") or 0)
CASE_CAP_S = 60  # a case past this is a hang (the caps should end every case in well under a second)


def fuzz(default_examples: int):
    return settings(max_examples=EXAMPLES or default_examples, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


class Hang(Exception):
    pass


@contextlib.contextmanager
def capped():
    """Fail the case as a hang if it runs past CASE_CAP_S (SIGALRM: the main thread, where pytest runs)."""
    def on_alarm(signum, frame):
        raise Hang(f"a fuzz case ran past its {CASE_CAP_S} s cap")
    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(CASE_CAP_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def assert_one_line(message: str) -> None:
    assert message and "\n" not in message.strip() and "Traceback" not in message, message


# -- run records -------------------------------------------------------------------------------------------

PARAMS = SessionParams(user=ClassParams(500, 0.5, 100), max_model_len=4000, think_time_s=0.02, output_tokens=2,
                       turn_tokens=50)
SESSIONS_CFG = SessionsConfig(url="http://127.0.0.1:9", params=PARAMS, users=[1, 2])
POOL_CFG = PoolConfig(url="http://127.0.0.1:9")
REQUEST = RequestResult(id="r1", tags={"rung": 0, "returning": True, "prefix_tokens": 100, "reusable_tokens": 300},
                        prompt_tokens=400, cached_tokens=300, cached_tokens_reported=True, ttft_s=0.01).to_dict()
RUNG = RungStats(1, 1.0, 3, 0, {}, 2, 2, 1.0, "cached_tokens", {"n": 2}, {"n": 1}, {"p50_s": 0.001, "p95_s": None},
                 800.0, 0.0, 0.5).to_dict()
VERDICT = asdict(Verdict(signal="cached_tokens", warm=True, warm_fraction=1.0, flags=[[True]]))
TEMPLATES = [
    {"type": "info", "model": "m", "tokens_per_word": 1.0, "nonce": 7},
    {"type": "request", "rung": 0, "users": 1, "attempt": 1, "result": REQUEST},
    {"type": "request", "probe": 1, "round": 1, "index": 0, "result": REQUEST},
    {"type": "round", "probe": 1, "round": 1, "delta": asdict(MetricsDelta(100.0, 50.0, 0.0))},
    {"type": "probe", "seq": 1, "stage": "coarse", "n": 1, "extra_blocks": 0, "sizes": [400], "verdict": VERDICT},
    {"type": "rung", "users": 1, "attempt": 1, "stats": RUNG},
    {"type": "rung_failed", "users": 2, "attempt": 1, "stats": {**RUNG, "users": 2, "status": "failed"}},
    {"type": "segment", "resumed": 1.0, "events_before": 3},
    {"type": "end", "result": {}},
    {"type": "interrupted", "signal": "SIGTERM"},
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)


@st.composite
def mutated_event(draw) -> dict:
    """A template event, perhaps with one field (at the top or one level down) replaced, removed or kept."""
    event = json.loads(json.dumps(draw(st.sampled_from(TEMPLATES))))
    target = event
    nested = [k for k, v in event.items() if isinstance(v, dict)]
    if nested and draw(st.booleans()):
        target = event[draw(st.sampled_from(nested))]
    keys = sorted(target)
    if keys:
        key = draw(st.sampled_from(keys))
        action = draw(st.sampled_from(["keep", "keep", "replace", "remove"]))
        if action == "replace":
            target[key] = draw(json_values)
        elif action == "remove":
            del target[key]
    return event


def header(kind: str, params: dict) -> dict:
    return {"type": "header", "kind": kind, "version": 1, "params": params, "started": 1.0}


@st.composite
def header_line(draw) -> bytes:
    kind = draw(st.sampled_from(["sessions", "pool"]))
    params = json.loads(json.dumps((SESSIONS_CFG if kind == "sessions" else POOL_CFG).to_params()))
    if draw(st.booleans()):  # one parameter damaged
        key = draw(st.sampled_from(sorted(params)))
        params[key] = draw(json_values)
    return json.dumps(header(kind, params)).encode()


odd_lines = st.sampled_from([
    b"", b"   ", b"not json", b"[1, 2]", b"3", b'"text"', b'{"no": "type"}', b'{"type": 5}', b'{"type": "x", "v": NaN}',
    b'{"type": "x", "v": Infinity}', b'{"type": "x", "v": 1e400}', b"\xff\xfe", b"[" * 5000 + b"]" * 5000,
    b"{" * 3000, b'{"type": "x", "n": ' + b"9" * 5000 + b"}",
])


@st.composite
def record_bytes(draw) -> bytes:
    lines = [draw(header_line())] if draw(st.integers(0, 9)) else []
    for _ in range(draw(st.integers(0, 12))):
        if draw(st.integers(0, 5)):
            lines.append(json.dumps(draw(mutated_event())).encode())
        else:
            lines.append(draw(odd_lines))
    body = b"\n".join(lines)
    end = draw(st.sampled_from(["newline", "none", "torn"]))
    if end == "newline":
        return body + b"\n"
    if end == "torn" and body:
        return body[: draw(st.integers(0, len(body)))]
    return body


def _replay(contents) -> None:
    """What --resume does with a record's contents: the run's config from its header, then the replay."""
    kind = contents.header.get("kind")
    if kind == "sessions":
        cfg = SessionsConfig.from_params(contents.header["params"])
        SessionsRun(cfg, resume=contents)._completed_rungs()
    else:
        cfg = PoolConfig.from_params(contents.header["params"])
        PoolRun(cfg, resume=contents)._load_replay()


@fuzz(300)
@given(record_bytes())
def test_reading_and_resuming_any_record_is_a_result_or_one_line_never_a_crash_and_never_loses_a_line(data):
    with capped(), tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "r.jsonl"
        path.write_bytes(data)
        try:
            contents = read_record(path)
        except BadInput as exc:
            assert_one_line(str(exc))
            return
        try:
            _replay(contents)
        except BadInput as exc:
            assert_one_line(str(exc))
        before = read_record(path)
        rec, resumed = RunRecord.resume(path, contents.header["kind"])
        rec.append("note", text="after")
        rec.close()
        after = read_record(path)
        # every event read before is still there, in order, followed by the segment and the new event
        assert after.events[: len(before.events)] == before.events
        assert [e["type"] for e in after.events[len(before.events):]] == ["segment", "note"]
        assert not after.torn_tail and not after.unterminated
        text = path.read_bytes()
        assert text.endswith(b"\n")
        assert after.segments == before.segments + 1
        last_two = [json.loads(line) for line in text.rstrip(b"\n").split(b"\n")[-2:]]  # each a line of its own
        assert [e["type"] for e in last_two] == ["segment", "note"]


# -- the SSE stream parser ------------------------------------------------------------------------------------

def parse(chunks: list[bytes], chat: bool = False) -> tuple[RequestResult, StreamParser]:
    r = RequestResult(id="x")
    p = StreamParser(r, 0, chat=chat)
    for i, chunk in enumerate(chunks, start=1):
        if not p.feed(chunk, i * 1000):
            break
    else:
        p.end_of_body()
    p.finish()
    return r, p


def split(body: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(body) + 1) for c in cuts})
    pieces, last = [], 0
    for c in points + [len(body)]:
        pieces.append(body[last:c])
        last = c
    return [x for x in pieces if x] or [b""]


sse_noise = st.lists(st.sampled_from([
    b"data: {\"choices\": [{\"text\": \"a\"}]}\n\n", b"data: [DONE]\n\n", b": comment\n", b"event: x\n", b"\r\n", b"\n",
    b"data: {\"usage\": {\"prompt_tokens\": 3}}\n\n", b"data: {\"choices\": [{\"text\": 5}]}\n\n", b"data: {bad json\n\n",
    b"data: {\"error\": {\"message\": \"boom\"}}\n\n", b"<!DOCTYPE html><html>", b"{\"id\": 1}", b"retry: 10\n",
    b"data: {\"choices\": [{\"delta\": {\"content\": \"b\"}}]}\n\n", b"data: {\"usage\": {\"prompt_tokens\": -1}}\n\n",
    b"data: {\"usage\": {\"prompt_tokens_details\": {\"cached_tokens\": 2}, \"prompt_tokens\": 3}}\n\n", b"\xff\xfe",
    b"data: {\"choices\": \"x\"}\n\n", b"data: 1\n\n",
]) | st.binary(max_size=40), max_size=20).map(b"".join)


@fuzz(500)
@given(sse_noise, st.lists(st.integers(0, 10_000), max_size=8), st.booleans())
def test_any_body_split_anywhere_parses_to_the_same_result_and_never_raises(body, cuts, chat):
    with capped():
        whole, _ = parse([body], chat)
        pieces, p = parse(split(body, cuts), chat)
    assert whole.error is None or whole.error["type"] in ERROR_TYPES
    assert whole.error is None or whole.error["type"] != "truncated_stream" or not p.done
    same = ("chunks", "prompt_tokens", "completion_tokens", "cached_tokens", "cached_tokens_reported")
    assert {k: getattr(pieces, k) for k in same} == {k: getattr(whole, k) for k in same}
    assert (pieces.error or {}).get("type") == (whole.error or {}).get("type")
    if whole.error is not None and whole.error["type"] != "not_openai":  # that one quotes the page as far as it had come
        assert pieces.error == whole.error
    if whole.ok:
        assert p.done  # a result without an error is a stream that reached [DONE]


tokens = st.lists(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=5), min_size=1,
                  max_size=30)


@fuzz(300)
@given(tokens, st.integers(0, 10_000), st.booleans(), st.lists(st.integers(0, 100_000), max_size=10), st.booleans())
def test_a_well_formed_stream_gives_every_token_its_usage_and_the_time_of_its_first_event(texts, prompt, crlf, cuts, chat):
    nl = b"\r\n" if crlf else b"\n"
    events = []
    for t in texts:
        choice = {"delta": {"content": t}} if chat else {"text": t}
        events.append(b"data: " + json.dumps({"choices": [choice]}).encode() + nl + nl)
    events.append(b"data: " + json.dumps({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": len(texts)}})
                  .encode() + nl + nl)
    body = b": keep-alive" + nl + b"".join(events) + b"data: [DONE]" + nl + nl
    chunks = split(body, cuts)
    with capped():
        r, p = parse(chunks, chat)
    assert r.ok, r.error
    assert (r.chunks, r.prompt_tokens, r.completion_tokens) == (len(texts), prompt, len(texts))
    assert len(p.token_ns) == sum(1 for t in texts if t)
    # the first token's time is that of the read that completed the first event's data line
    first_line_end = body.index(nl, body.index(b"data: ")) + len(nl) - 1
    ends = [sum(len(c) for c in chunks[: i + 1]) for i in range(len(chunks))]
    read = next(i for i, e in enumerate(ends, start=1) if e > first_line_end)
    assert r.ttft_s == read * 1000 / 1e9


def test_an_sse_line_without_end_is_refused_at_its_cap_not_held_forever():
    from servesize.measure.client import MAX_SSE_LINE_BYTES

    r = RequestResult(id="x")
    p = StreamParser(r, 0)
    chunk = b"data: " + b"x" * (1 << 20)
    fed = 0
    while p.feed(chunk, 1):
        fed += len(chunk)
        assert fed <= MAX_SSE_LINE_BYTES + len(chunk)
    assert r.error["type"] == "malformed_sse" and "longer than" in r.error["message"]


# -- the measure command line -----------------------------------------------------------------------------------

numbers = st.sampled_from(["0", "-1", "-16", "1", "2", "3", "16", "1.5", "0.5", "1e3", "1e400", "-1e400", "1e999999999", "nan",
                           "inf", "-inf", "", " ", "abc", "4k", "2.77M", "1,2", "9" * 5000, "0x10", "1_000", "10%", "1e-400"])
POOL_FLAGS = ["--prompt-tokens", "--rounds", "--predicted-tokens", "--max-parallel", "--block-size", "--warm-share",
              "--timeout", "--stall-timeout", "--seed"]
SESSIONS_FLAGS = ["--turns-per-session", "--max-model-len", "--predicted-users", "--predicted-decode", "--duration",
                  "--requests-per-user", "--warm-target", "--max-error-rate", "--max-ttft-p95", "--timeout",
                  "--stall-timeout", "--seed", "--users", "--median", "--prefix", "--think-time", "--output-tokens",
                  "--turn-tokens"]
SERVER_FLAGS = SESSIONS_FLAGS + ["--prompt-tokens", "--rounds"]
BENCH_FLAGS = ["--random-input-len", "--random-output-len", "--random-range-ratio", "--random-prefix-len", "--num-prompts",
               "--max-concurrency", "--request-rate", "--seed", "--timeout", "--stall-timeout"]
URLS = st.sampled_from(["http://127.0.0.1:9", "http://127.0.0.1:9/v1", "127.0.0.1:9", "ftp://x", "http://", "http://[::1",
                        "http://127.0.0.1:99999", ""])


@st.composite
def measure_argv(draw) -> list[str]:
    command = draw(st.sampled_from(["pool", "sessions", "server", "bench"]))
    flags = {"pool": POOL_FLAGS, "sessions": SESSIONS_FLAGS, "server": SERVER_FLAGS, "bench": BENCH_FLAGS}[command]
    argv = ["measure", command, "--quiet"]
    if draw(st.integers(0, 5)):
        argv += ["--url", draw(URLS)]
    for flag in draw(st.lists(st.sampled_from(flags), max_size=4, unique=True)):
        argv += [flag, draw(numbers | st.integers(-5, 300).map(str))]
    if command == "server":
        argv += ["--predict", "llama-3.1-8b --gpus 1xH100", "--record-dir", "run"]
    elif draw(st.booleans()):
        argv += ["--users", draw(st.sampled_from(["1", "1,2", "0", "-1", "1,,2", "100001", ",", "a,b", "1e3"]))] \
            if command == "sessions" else []
    if draw(st.integers(0, 4)) == 0:
        argv += ["--json"]
    return argv


def run_in_scratch(argv: list[str], record: bytes | None = None) -> Ran:
    """The command (tests/cli_runner.py) in a scratch folder, where default record files land and ``record``, if
    given, is old.jsonl; capped in memory."""
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            if record is not None:
                pathlib.Path("old.jsonl").write_bytes(record)
            return run_captured(*argv, around=capped)
        finally:
            os.chdir(cwd)


def assert_cli_contract(code: int, err: str) -> None:
    assert code in (0, 2), (code, err)
    assert "Traceback" not in err and "servesize: bug:" not in err, err
    if code:
        assert err.startswith("servesize") and err.count("\n") == 1, err


@fuzz(150)
@given(measure_argv())
def test_any_measure_command_line_exits_0_or_2_with_one_line(argv):
    code, _, err = run_in_scratch(argv)
    assert_cli_contract(code, err)


@fuzz(100)
@given(record_bytes(), st.sampled_from(["pool", "sessions"]), st.booleans())
def test_resuming_any_record_from_the_command_line_exits_0_or_2_with_one_line(record, command, give_url):
    argv = ["measure", command, "--resume", "old.jsonl", "--quiet"] + (["--url", "http://127.0.0.1:9"] if give_url else [])
    code, _, err = run_in_scratch(argv, record)
    assert code in (0, 2), (code, err)
    assert "Traceback" not in err and "servesize: bug:" not in err, err
    # a refusal is its last line; before it, resume may say what it resumed and what it repaired
    lines = err.strip().split("\n")
    assert all(line.startswith("servesize") for line in lines) and len(lines) <= 3, err


# -- a rung's statistics and the knee, over any mix of results -----------------------------------------------

# built once: a strategy made inside the draw loop is validated again at every draw (most of this property's time)
_COUNT, _BOOL, _PREFIX, _OK = st.integers(0, 30), st.booleans(), st.integers(0, 200), st.integers(0, 3)
_CACHED, _REUSABLE = st.none() | st.integers(0, 2000), st.integers(0, 1500)
_PROMPT, _TTFT = st.none() | st.integers(1, 4000), st.none() | st.floats(0, 100)


@st.composite
def request_results(draw) -> list[RequestResult]:
    out = []
    for i in range(draw(_COUNT)):
        returning = draw(_BOOL)
        prefix = draw(_PREFIX)
        ok = draw(_OK) > 0
        cached = draw(_CACHED)
        out.append(RequestResult(
            id=f"r{i}", tags={"returning": returning, "turn": 1 if returning else 0, "prefix_tokens": prefix,
                              "reusable_tokens": prefix + draw(_REUSABLE)},
            prompt_tokens=draw(_PROMPT), cached_tokens=cached, cached_tokens_reported=cached is not None,
            ttft_s=draw(_TTFT), error=None if ok else {"type": "connection_refused", "message": "x"}))
    return out


@fuzz(200)
@given(st.lists(request_results(), min_size=1, max_size=5), st.floats(0.05, 1.0), st.floats(0.0, 1.0))
def test_no_rung_is_warm_from_failed_requests_and_no_figure_is_nan_or_out_of_range(rungs, target, max_error_rate):
    import math

    from servesize.measure.sessions import knee

    stats = []
    for users, results in enumerate(rungs, start=1):
        g = rung_stats_of(users, results, max_error_rate)
        assert 0 <= g.errors <= g.requests and 0 <= g.returning_errors <= g.returning and g.warm_hits <= g.requests
        if g.warm_hit_rate is not None:
            assert 0 <= g.warm_hit_rate <= 1 and not math.isnan(g.warm_hit_rate)
            # a failed returning request is a miss: the rate is never above what the completed ones allow
            assert g.warm_hit_rate <= (g.returning - g.returning_errors) / g.returning
        stats.append(g)
    k = knee(stats, target)
    warm = {g.users for g in stats if g.state(target) == "warm"}
    assert k["warm_users"] is None or k["warm_users"] in warm
    for g in stats:
        if g.requests == 0 or g.errors / g.requests > max_error_rate:
            assert g.failed and g.state(target) == "failed"  # never warm, whatever its completed requests said


def rung_stats_of(users, results, max_error_rate):
    """A rung's statistics and its failure, as SessionsRun._rung decides them."""
    from servesize.measure.sessions import rung_stats

    g = rung_stats(users, 1.0, results)
    cfg = SessionsConfig(url="u", params=PARAMS, users=[1], max_error_rate=max_error_rate)
    failure = SessionsRun(cfg)._failure(g, results)
    if failure:
        g.status, g.stop = "failed", failure
    return g


# -- a lying server (issue 16): cache counts out of range, usage inconsistent with the prompt ----------------
# Generated lies go through the same SSE parser as a real answer, then decide a probe whose truth is known
# from its TTFTs: every later-round request of a truly cold probe is about as slow as its cold round (a
# measured TTFT is never below the server's injected one). Whatever the counts say, such a probe is never
# warm: a count is refused as impossible, or its warm claims are refuted by the TTFTs, or it says cold.

LIES = st.one_of(
    st.integers(-3, 3).map(lambda d: ("prompt+", d)),  # around the prompt: 0..2 too many is impossible
    st.sampled_from([("claim_warm", 0), ("truth", 0), ("zero", 0), ("huge", 2**70), ("max", 2**63), ("inf", 0),
                     ("nan", 0), ("frac", 0), ("text", 0), ("bool", 0), ("null", 0), ("absent", 0)]),
    st.integers(0, 10**6).map(lambda k: ("any", k)),
)


def lied_value(lie: tuple[str, int], prompt: int, true_cached: int, block: int):
    """The cached_tokens a lying server reports for a prompt of ``prompt`` tokens of which ``true_cached`` hit."""
    kind, k = lie
    return {"prompt+": prompt + k, "claim_warm": (prompt - 1) // block * block, "truth": true_cached, "zero": 0,
            "huge": k, "max": k, "inf": float("inf"), "nan": float("nan"), "frac": prompt / 3 + 0.5, "text": str(prompt),
            "bool": True, "null": None, "absent": None, "any": k}[kind]


def usage_event(prompt_reported, cached, lie_kind: str) -> bytes:
    usage: dict = {"prompt_tokens": prompt_reported, "completion_tokens": 1}
    if lie_kind != "absent":
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    head = b'data: {"choices": [{"text": " tok"}]}\n\n'
    return head + b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\ndata: [DONE]\n\n"


def parsed(body: bytes, ttft_ns: int) -> RequestResult:
    r = RequestResult(id="x")
    p = StreamParser(r, 0)
    p.feed(body, ttft_ns)
    p.end_of_body()
    p.finish()
    return r


@fuzz(300)
@given(st.integers(2, 64), st.integers(1, 6), st.lists(LIES, min_size=1, max_size=8), st.integers(2, 4),
       st.lists(st.floats(0.9, 1.5), min_size=1, max_size=8), st.sampled_from([None, -1, 0, 7, 10**9]),
       st.booleans(), st.floats(0.05, 1.0))
def test_a_truly_cold_probe_is_never_warm_whatever_the_server_reports(blocks, n, lies, rounds, slowdowns, prompt_skew,
                                                                      lying_metrics, warm_share):
    from servesize.errors import ServesizeError
    from servesize.measure.pool import classify

    block, S = 16, blocks * 16 + 1
    cold_ns = 1_000_000_000
    sizes = [S] * n
    results, deltas, i = [], [], 0
    for rnd in range(rounds):
        row = []
        for _ in range(n):
            lie = lies[i % len(lies)]
            reported_prompt = S if prompt_skew is None else (S + prompt_skew if prompt_skew < 10**9 else prompt_skew)
            slow = 1.0 if rnd == 0 else slowdowns[i % len(slowdowns)]  # later rounds: as slow as cold, or slower
            body = usage_event(reported_prompt if reported_prompt >= 0 else -1, lied_value(lie, S, 0, block), lie[0])
            with capped():
                row.append(parsed(body, int(cold_ns * slow)))
            i += 1
        results.append(row)
        claimed = sum(r.cached_tokens or 0 for r in row)
        deltas.append(MetricsDelta(queries=float(n * S), hits=float(claimed if lying_metrics else 0), preemptions=0.0))
    for r in (r for row in results for r in row):
        assert r.error is None or r.error["type"] == "malformed_sse"  # a count that is no count: malformed, never raised
    if any(r.error is not None for row in results for r in row):
        return  # the request failed: a probe with a failed request stops the run (exit 2), never decides
    try:
        v = classify(sizes, results, deltas, block_size=block, warm_share=warm_share)
    except ServesizeError as exc:
        assert_one_line(str(exc))
        return
    assert not v.warm, (v.signal, v.by_signal, v.refuted)


E2E_POOL = 512  # 8 prompts of 65 tokens (4 blocks of 16 each, the last token recomputed)


# both commands, each its own cases (a parameter, not a draw: no later test has to check that both ran)
@pytest.mark.parametrize("command", ["pool", "sessions"])
@settings(max_examples=min(EXAMPLES, 20) if EXAMPLES else 3, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])  # each case is a real run of seconds: at most 20 a command
@given(st.lists(LIES, min_size=1, max_size=4))
def test_measure_against_a_lying_server_never_reports_a_false_capacity_nor_a_bug(command, lies):
    """End to end, a few cases (each is a real run, seconds long): exit 0 or 2, one line on stderr, no bug line;
    a pool run that exits 0 reports a pool no larger than the server's own."""
    from testserver import ServerConfig, TestServer

    def cached_fn(index, prompt, true_cached):
        return lied_value(lies[index % len(lies)], prompt, true_cached, 16)

    # slow prefill (10 ms a token: a 65-token prompt 0.65 s cold, 10 ms warm) so TTFT decides beyond noise
    config = ServerConfig(capacity_tokens=E2E_POOL, ttft_base_s=0.0, ttft_per_token_s=0.01, itl_s=0.001, cached_fn=cached_fn)
    with tempfile.TemporaryDirectory() as tmp, capped(), TestServer(config) as server:
        if command == "pool":
            argv = ["measure", "pool", "--url", server.url, "--prompt-tokens", "65", "--rounds", "2", "--max-parallel", "16",
                    "--no-fine", "--record", f"{tmp}/r.jsonl", "--quiet", "--json"]
        else:
            # one user's session (about 150 tokens) stays warm; eight users' (about 100 unique tokens each) cycle
            # through the 512-token pool and evict each other: the true knee is [1, 8)
            argv = ["measure", "sessions", "--url", server.url, "--users", "1,8", "--requests-per-user", "3", "--median",
                    "120", "--sigma", "0.3", "--prefix", "20", "--think-time", "0.01", "--output-tokens", "2", "--turn-tokens",
                    "10", "--max-model-len", "2000", "--subagent-ratio", "0", "--duration", "60", "--record",
                    f"{tmp}/r.jsonl", "--quiet", "--json"]
        code, out, text = run_captured(*argv)
    assert code in (0, 2) and "bug" not in text and "Traceback" not in text, text
    assert "usage:" not in text and "unrecognized" not in text, text  # the case measured, it was not a flag typo
    if code == 2:
        assert text.count("\n") == 1 and text.startswith("servesize: "), text
    if code == 0 and command == "pool":
        doc = json.loads(out)
        assert doc["pool_tokens"]["low"] <= E2E_POOL, (lies, doc["pool_tokens"], doc["notes"])
    if out and command == "sessions":
        assert json.loads(out)["knee"]["warm_users"] != 8, lies  # never the lie's knee


# -- a server's small answers: /metrics, /v1/models, /tokenize (issue 31) --------------------------------------------
# Each reader is the real one (MetricsScraper.scrape, StreamClient.resolve_model, PromptFactory.count); only the HTTP
# call under it answers what the case drew, decoded as aiohttp's resp.text() decodes a UTF-8 body (strictly).

NASTY_NUMBERS = ["0", "-16", "2.5", "16", "4096", "1e400", "-1e400", "1e308", "inf", "-inf", "+Inf", "nan", "NaN", "",
                 "None", "9" * 60, "١٦", "0x10", "1_000", "16.0", " 16", "true"]
ESCAPES = ["\\x", "\\N{foo}", "\\\\", '\\"', "\\n", "\\u12", "é", "\\"]


def _decoded(body: bytes) -> str:
    return body.decode("utf-8")  # aiohttp's resp.text() with a UTF-8 charset: strict, UnicodeDecodeError on bad bytes


@st.composite
def metrics_bodies(draw) -> bytes:
    """A /metrics answer: vLLM's series (every name servesize reads) with labels and values from the nasty set, label
    text with escapes the format has and has not, lines that are no sample, CRLF, and bytes that are not UTF-8."""
    from servesize.measure.metrics import CACHE_CONFIG, HITS, KV_USAGE, PREEMPTIONS, QUERIES, RUNNING, WAITING

    names = [*QUERIES, *HITS, *PREEMPTIONS, *KV_USAGE, *RUNNING, *WAITING, CACHE_CONFIG, "vllm:other"]
    label_text = st.one_of(st.sampled_from(NASTY_NUMBERS), st.text(max_size=12),
                           st.lists(st.sampled_from(ESCAPES + ["a", "1"]), max_size=4).map("".join))
    lines = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["sample", "sample", "sample", "comment", "junk"]))
        if kind == "comment":
            lines.append("# HELP " + draw(st.text(max_size=20)))
        elif kind == "junk":
            lines.append(draw(st.text(max_size=40)))
        else:
            labels = draw(st.dictionaries(st.sampled_from(["block_size", "num_gpu_blocks", "engine", "model_name",
                                                            "cache_dtype"]), label_text, max_size=4))
            inner = ",".join(f'{k}="{v.replace(chr(34), "")}"' for k, v in labels.items())
            value = draw(st.one_of(st.sampled_from(NASTY_NUMBERS), st.floats().map(repr)))
            lines.append(f"{draw(st.sampled_from(names))}{'{' + inner + '}' if labels else ''} {value}")
    text = draw(st.sampled_from(["\n", "\r\n"])).join(lines)
    body = text.encode("utf-8", "surrogatepass")
    if draw(st.booleans()) and draw(st.booleans()):
        at = draw(st.integers(0, len(body)))
        body = body[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00"])) + body[at:]
    return body


def _figure_ok(x) -> bool:
    return x is None or (isinstance(x, float) and math.isfinite(x) and x >= 0)


@fuzz(300)
@given(metrics_bodies(), st.sampled_from([200, 200, 200, 404, 500]))
def test_any_metrics_answer_is_a_snapshot_of_finite_figures_or_the_signal_dropped_with_a_note(body, status):
    import asyncio

    from servesize.measure.metrics import MAX_CONFIG_LABEL, MetricsScraper

    class Server:
        base_url = "http://127.0.0.1:9"

        async def get(self, path, timeout_s=None):
            assert path == "/metrics"
            return status, _decoded(body)

    with capped():
        scraper = MetricsScraper(Server())
        snap = asyncio.run(scraper.scrape())
    if snap is None:
        assert not scraper.enabled and scraper.note
        assert_one_line(scraper.note)
        return
    for name in ("prefix_queries", "prefix_hits", "preemptions", "running", "waiting", "kv_usage"):
        assert _figure_ok(getattr(snap, name)), (name, getattr(snap, name))
    for label in (snap.block_size, snap.num_gpu_blocks):
        assert label is None or (type(label) is int and 1 <= label <= MAX_CONFIG_LABEL)
    assert snap.engine_pool_tokens is None or snap.engine_pool_tokens == snap.block_size * snap.num_gpu_blocks
    assert (snap.refused is None) or (snap.cache_config is None and scraper.refused and
                                      "cache_config_info" in scraper.refused)


MODEL_LIST = {"object": "list", "data": [{"id": "Qwen/Qwen3-0.6B", "object": "model", "max_model_len": 4096,
                                          "root": "Qwen/Qwen3-0.6B"}]}
json_with_nonfinite = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10)


@st.composite
def mutated(draw, template: dict) -> object:
    """``template`` with one value at some depth replaced by any JSON value (NaN and infinities too), or removed."""
    doc = json.loads(json.dumps(template))
    node = doc
    while True:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        if not keys:
            return doc
        key = draw(st.sampled_from(keys))
        child = node[key]
        if isinstance(child, (dict, list)) and child and draw(st.booleans()):
            node = child
            continue
        if draw(st.booleans()) or isinstance(node, list):
            node[key] = draw(json_with_nonfinite)
        else:
            del node[key]
        return doc


def small_answers(template: dict):
    """An answer to a small JSON endpoint: the template mutated, any JSON at all, an HTML page, text, or bytes
    that are not UTF-8; serialised as a server would (NaN as JSON's non-standard NaN)."""
    doc = st.one_of(mutated(template), mutated(template), json_with_nonfinite)
    as_bytes = doc.map(lambda d: json.dumps(d, allow_nan=True).encode())
    return st.one_of(as_bytes, as_bytes, as_bytes, st.just(b"<html><body>502 Bad Gateway</body></html>"),
                     st.binary(max_size=40), st.just(b'{"count": ' + b"9" * 5000 + b"}"),
                     st.just(b"[" * 100_000))  # nested past Python's recursion limit: RecursionError, not ValueError


@fuzz(300)
@given(small_answers(MODEL_LIST), st.sampled_from([200, 200, 200, 404]), st.sampled_from([None, "given"]))
def test_any_v1_models_answer_is_a_model_name_or_one_line_naming_the_endpoint(body, status, model):
    import asyncio

    from servesize.measure.client import StreamClient

    client = StreamClient("http://127.0.0.1:9", model)

    async def get(path, timeout_s=None):
        assert path == "/v1/models"
        return status, _decoded(body)

    client.get = get  # type: ignore[method-assign]
    with capped():
        try:
            name = asyncio.run(client.resolve_model())
        except BadInput as exc:
            assert_one_line(str(exc))
            assert "/v1/models" in str(exc)
            return
    assert isinstance(name, str) and name


TOKENIZE = {"count": 1234, "max_model_len": 4096, "tokens": [1, 2, 3]}


@fuzz(300)
@given(small_answers(TOKENIZE), st.sampled_from([200, 200, 200, 404, 500]))
def test_any_tokenize_answer_is_a_count_or_tokenize_dropped_with_a_note(body, status):
    import asyncio

    from servesize.measure.client import json_or_text
    from servesize.measure.prompts import MAX_TOKEN_COUNT, PromptFactory

    class Server:
        base_url, model = "http://127.0.0.1:9", "m"

        async def post_json(self, path, payload, timeout_s=None):
            assert path == "/tokenize"
            return status, json_or_text(_decoded(body))  # StreamClient.post_json's own reading of the text

    factory = PromptFactory(Server())
    with capped():
        count = asyncio.run(factory.count("some prompt"))
    if count is None:
        assert not factory.use_tokenize and "/tokenize" in factory.note
        assert_one_line(factory.note)
    else:
        assert type(count) is int and 0 <= count <= MAX_TOKEN_COUNT and factory.use_tokenize
