"""The streaming client against the test server: timings, usage, and every failure as a result."""

import asyncio

import pytest
from testserver import Fault, ServerConfig, TestServer

from servesize.measure.client import RequestResult, StreamClient, StreamParser, summarise

PROMPT = " ".join(f"w{i}" for i in range(200))  # 200 tokens: one word is one token on the test server


def complete(config: ServerConfig, prompt: str = PROMPT, times: int = 1, **client_kw):
    async def go():
        async with TestServer(config) as server:
            async with StreamClient(server.url, **client_kw) as client:
                await client.resolve_model()
                return [await client.complete(prompt, max_tokens=5, request_id=f"r{i}") for i in range(times)], server
    return asyncio.run(go())


def test_a_stream_reports_usage_cached_tokens_and_token_timings():
    (cold, warm), server = complete(ServerConfig(block_size=16, itl_s=0.002), times=2)
    assert cold.ok and warm.ok
    assert cold.prompt_tokens == 200 and cold.completion_tokens == 5
    assert cold.cached_tokens == 0 and cold.cached_tokens_reported
    assert warm.cached_tokens == (200 - 1) // 16 * 16  # whole blocks, never the last token
    assert cold.chunks == 5
    assert (cold.itl is None) if cold.coalesced else cold.itl["n"] == 4  # a starved host may read it in one burst
    assert cold.first_byte_s <= cold.ttft_s <= cold.first_content_s <= cold.last_token_s <= cold.end_s


# An event loop may fire a timer up to its clock's resolution early (uvloop's is 1 ms): the slack
# allowed when the server's own stamps are checked against the delay it was told to inject.
TIMER_SLACK_NS = 1_000_000


def test_the_client_brackets_the_servers_own_stamps_and_never_measures_less_than_the_injected_ttft():
    """Decided by causality, not by a time window: a client cannot see a chunk before the server wrote it,
    so however loaded the machine, its clock reads straddle the server's own (same CLOCK_MONOTONIC)."""
    config = ServerConfig(ttft_base_s=0.05, ttft_per_token_s=0.0005, timing=True)
    (cold, warm), server = complete(config, times=2)
    cold_log, warm_log = server.log
    assert (cold_log["cached_tokens"], warm_log["cached_tokens"]) == (0, (200 - 1) // 16 * 16)
    assert cold_log["ttft_injected_s"] == pytest.approx(0.05 + 0.0005 * 200)
    assert warm_log["ttft_injected_s"] == pytest.approx(0.05 + 0.0005 * (200 - 192))
    for r, log in ((cold, cold_log), (warm, warm_log)):
        assert r.ok
        first_token_ns = r.t_sent_ns + round(r.ttft_s * 1e9)
        last_token_ns = r.t_sent_ns + round(r.last_token_s * 1e9)
        assert r.t_sent_ns <= log["t_received_ns"]  # stamped before the request left
        assert log["t_first_sent_ns"] <= first_token_ns  # the first token, not the headers or a keep-alive
        assert log["t_last_sent_ns"] <= last_token_ns  # the last token, not the first again
        assert log["t_first_sent_ns"] - log["t_received_ns"] >= log["ttft_injected_s"] * 1e9 - TIMER_SLACK_NS
        assert r.ttft_s * 1e9 >= log["ttft_injected_s"] * 1e9 - TIMER_SLACK_NS
        assert r.server == {"t_received_ns": log["t_received_ns"], "t_first_sent_ns": log["t_first_sent_ns"],
                            "ttft_injected_s": log["ttft_injected_s"]}  # x_server, from the first token's event


T0_NS = 5_000_000_000


def parse(reads, *, chat: bool = False) -> RequestResult:
    """Feed ``(bytes, ms after the request was sent)`` reads to a StreamParser, as the client does."""
    r = RequestResult(id="p", t_sent_ns=T0_NS)
    parser = StreamParser(r, T0_NS, chat=chat)
    for chunk, ms in reads:
        if not parser.feed(chunk, T0_NS + ms * 1_000_000):
            break
    else:
        parser.end_of_body()
    parser.finish()
    return r


def event(payload: str) -> bytes:
    return b"data: " + payload.encode() + b"\n\n"


USAGE = '{"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 0}}}'


def test_each_timing_is_the_read_that_brought_its_event():
    r = parse([
        (b": a keep-alive comment\n\n", 5),  # the first byte, no token
        (event('{"choices": [{"text": ""}]}'), 40),  # the first choice: TTFT, though its text is empty
        (event('{"choices": [{"text": " a"}]}') + event('{"choices": [{"text": " b"}]}'), 70),  # two in one read
        (b'data: {"choices": [{"te', 100), (b'xt": " c"}]}\n', 120), (b"\n", 150),  # a line split over reads
        (event(USAGE) + b"data: [DONE]\n\n", 160),
    ])
    assert r.ok and r.error is None
    assert r.first_byte_s == pytest.approx(0.005)
    assert r.ttft_s == pytest.approx(0.040)
    assert r.first_content_s == pytest.approx(0.070)
    assert r.last_token_s == pytest.approx(0.120)  # completed by the read at 120 ms, not dispatched at 150
    assert r.chunks == 4
    gaps = [0.070 - 0.070, 0.120 - 0.070]
    assert r.itl["n"] == 2 and r.itl["max_s"] == pytest.approx(max(gaps)) and r.itl["mean_s"] == pytest.approx(sum(gaps) / 2)
    assert r.decode_tok_per_s == pytest.approx((3 - 1) / (0.120 - 0.070))  # completion_tokens from usage
    assert (r.prompt_tokens, r.completion_tokens, r.cached_tokens, r.cached_tokens_reported) == (7, 3, 0, True)


def _stream_in_reads(events: int, reads: int) -> list[tuple[bytes, int]]:
    """``events`` token events delivered in ``reads`` reads, 10 ms apart, the last one carrying [DONE]."""
    out = [(b"".join(event(f'{{"choices": [{{"text": " t{i}"}}]}}') for i in range(events) if i * reads // events == k),
            10 * (k + 1)) for k in range(reads)]
    return out + [(b"data: [DONE]\n\n", 10 * (reads + 1))]


@pytest.mark.parametrize("reads, coalesced", [(1, True), (31, True), (32, False), (64, False)])
def test_a_stream_read_in_bursts_has_its_itl_and_decode_speed_withheld_never_0_ms(reads, coalesced):
    """Issue 31: on a starved client host a 64-token stream arrived in one read, and servesize reported an ITL of 0.0 ms
    and ~79,000 tok/s per user. Events that came in fewer reads than half their number are not timed by the reads."""
    r = parse(_stream_in_reads(64, reads))
    assert r.ok and (r.token_events, r.token_reads) == (64, reads)
    assert r.coalesced is coalesced
    if coalesced:
        assert r.itl is None and r.decode_tok_per_s is None
    else:
        assert r.itl["n"] == 63 and r.decode_tok_per_s == pytest.approx(63 / (0.010 * (reads - 1)))


def test_a_chat_stream_times_its_first_token_at_the_role_delta_and_its_content_at_the_first_text():
    r = parse([
        (event('{"choices": [{"delta": {"role": "assistant"}}]}'), 30),
        (event('{"choices": [{"delta": {"content": " hi"}}]}'), 55),
        (event('{"choices": [{"delta": {"content": " there"}}]}'), 75),
        (b"data: [DONE]\n\n", 80),
    ], chat=True)
    assert r.ok
    assert (r.ttft_s, r.first_content_s, r.last_token_s) == pytest.approx((0.030, 0.055, 0.075))
    assert r.decode_tok_per_s == pytest.approx((2 - 1) / (0.075 - 0.055))  # no usage: the text events are counted


def test_an_event_of_several_data_lines_is_timed_at_its_first():
    r = parse([(b'data: {"choices":\n', 10), (b'data: [{"text": " a"}]}\n', 25), (b"\n", 30), (b"data: [DONE]\n\n", 31)])
    assert r.ok and r.chunks == 1
    assert (r.ttft_s, r.first_content_s) == pytest.approx((0.010, 0.010))


def test_a_body_that_ends_without_done_is_a_truncated_stream_and_keeps_its_timings():
    r = parse([(event('{"choices": [{"text": " a"}]}'), 20), (event('{"choices": [{"text": " b"}]}'), 35)])
    assert r.error["type"] == "truncated_stream" and "2 token chunks" in r.error["message"]
    assert (r.ttft_s, r.last_token_s) == pytest.approx((0.020, 0.035))


def test_the_parse_stops_at_the_first_malformed_event_and_keeps_what_came_before():
    r = parse([(event('{"choices": [{"text": " a"}]}'), 20), (b"data: {not json\n\n", 30),
               (event('{"choices": [{"text": " b"}]}'), 40)])
    assert r.error["type"] == "malformed_sse"
    assert r.chunks == 1 and r.last_token_s == pytest.approx(0.020)


def test_a_missing_cached_tokens_field_is_none_and_read_as_zero_only_by_the_flagged_accessor():
    (r,), _ = complete(ServerConfig(report_cached_tokens=False))
    assert r.ok and r.cached_tokens is None and not r.cached_tokens_reported
    assert r.cached_tokens_or_zero == 0


def test_chat_completions_stream_too():
    (r,), _ = complete(ServerConfig(), api="chat")
    assert r.ok and r.first_content_s is not None and r.completion_tokens == 5


# Only the stall case races two timers, and there the server's stall (30 s, ended when the test stops
# the server) is a hundred times the client's stall timeout; the other faults get timeouts that no
# load reaches, so nothing here depends on how fast the machine is.
UNREACHED = {"stall_timeout_s": 30, "timeout_s": 60}


@pytest.mark.parametrize("fault, error_type, client_kw", [
    (Fault("status", status=500), "http_error", UNREACHED),
    (Fault("status", status=400), "http_error", UNREACHED),
    (Fault("malformed"), "malformed_sse", UNREACHED),
    (Fault("stall", stall_s=30), "stall_timeout", {"stall_timeout_s": 0.3, "timeout_s": 60}),
    (Fault("reset"), "connection_reset", UNREACHED),
])
def test_every_server_failure_is_a_result_with_a_typed_error_never_an_exception(fault, error_type, client_kw):
    (r,), _ = complete(ServerConfig(faults=[fault], itl_s=0.01), **client_kw)
    assert not r.ok
    assert r.error["type"] == error_type
    assert r.error["message"]


def test_an_http_error_carries_an_excerpt_of_the_body():
    (r,), _ = complete(ServerConfig(faults=[Fault("status", status=503)]))
    assert r.status == 503 and "HTTP 503" in r.error["message"] and "injected failure" in r.error["message"]


def test_a_total_timeout_before_the_first_token_is_not_called_a_stall():
    # the first token would come after 30 s, a hundred times the timeout (stopping the server ends the stream)
    (r,), _ = complete(ServerConfig(ttft_base_s=30.0), timeout_s=0.3, stall_timeout_s=0.1)
    assert r.error["type"] == "total_timeout"


def test_a_refused_connection_is_a_result():
    async def go():
        async with StreamClient("http://127.0.0.1:9") as client:
            return await client.complete("hello", request_id="x")
    r = asyncio.run(go())
    assert r.error["type"] == "connection_refused"


def test_the_client_lets_an_idle_connection_go_before_vllms_server_closes_it():
    """A POST sent on a keep-alive connection the server has just closed fails as a reset that aiohttp does not
    retry; the client's idle limit is under the server's, so it opens a new connection instead."""
    from servesize.measure.client import CLIENT_KEEPALIVE_S, SERVER_KEEPALIVE_DEFAULT_S

    async def go():
        async with StreamClient("http://127.0.0.1:9") as client:
            return client.session.connector._keepalive_timeout
    assert asyncio.run(go()) == CLIENT_KEEPALIVE_S < SERVER_KEEPALIVE_DEFAULT_S / 2


def test_a_client_used_outside_async_with_says_so():
    """A programming error, not a request failure: raised, with what was missing, not an AttributeError on None."""
    client = StreamClient("http://127.0.0.1:9")
    with pytest.raises(RuntimeError, match="outside 'async with'"):
        asyncio.run(client.complete("hello", request_id="x"))
    with pytest.raises(RuntimeError, match="outside 'async with'"):
        asyncio.run(client.get("/v1/models"))


def test_summarise_gives_quantiles_of_a_known_list():
    s = summarise([0.1, 0.2, 0.3, 0.4, 0.5])
    assert s["n"] == 5 and s["p50_s"] == pytest.approx(0.3) and s["max_s"] == 0.5
    assert s["p95_s"] == pytest.approx(0.4 + 0.1 * 0.8)


@pytest.mark.parametrize("body", [
    b'data: {"choices":"x"}\n\ndata: [DONE]\n\n',
    b'data: {"choices":[5]}\n\ndata: [DONE]\n\n',
    b'data: {"choices":[{"text":"a"}],"usage":7}\n\ndata: [DONE]\n\n',
    b'data: {"choices":[{"text":"a"}],"usage":{"prompt_tokens":3,"prompt_tokens_details":{"cached_tokens":"n/a"}}}\n\ndata: [DONE]\n\n',
    b'data: {"choices":[{"text":7}]}\n\ndata: [DONE]\n\n',
])
def test_unexpected_event_shapes_are_a_malformed_sse_result_not_a_crash(body):
    from aiohttp import web

    from servesize.measure.client import StreamClient

    async def handler(request):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(body)
        await resp.write_eof()
        return resp

    async def go():
        app = web.Application()
        app.router.add_post("/v1/completions", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        try:
            async with StreamClient(f"http://127.0.0.1:{port}", "m", timeout_s=10, stall_timeout_s=5) as client:
                return await client.complete("hello world", max_tokens=1)
        finally:
            await runner.cleanup()

    r = asyncio.run(go())
    assert not r.ok and r.error["type"] == "malformed_sse"


def test_the_threaded_test_server_serves_stops_and_a_stop_after_a_failed_start_is_a_no_op():
    import socket
    import urllib.request

    with TestServer(ServerConfig()) as server:
        assert server.port != 0
        with urllib.request.urlopen(server.url + "/health", timeout=10) as resp:
            assert resp.status == 200
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        failed = TestServer(ServerConfig(), port=taken.getsockname()[1])
        with pytest.raises(OSError):
            failed.start()
        failed.stop()  # was an AttributeError on the event that a failed start never made
    finally:
        taken.close()


def test_json_nested_past_the_recursion_limit_is_malformed_never_a_crash():
    """A review of the readers found '[' x 100,000 raising RecursionError (not a ValueError) out of the SSE parser,
    /v1/models and /tokenize: a bug line. Each now reads it as what it is, JSON it cannot use."""
    from servesize.measure.client import json_or_text

    deep = "[" * 100_000
    r = RequestResult(id="r")
    parser = StreamParser(r, 0)
    assert parser.feed(b"data: " + deep.encode() + b"\n\n", 1) is False
    assert r.error["type"] == "malformed_sse"
    assert json_or_text(deep) == deep

    client = StreamClient("http://127.0.0.1:9")

    async def get(path, timeout_s=None):
        return 200, '{"data": ' + deep

    client.get = get
    from servesize.errors import BadInput

    with pytest.raises(BadInput, match="/v1/models did not return an OpenAI model list"):
        asyncio.run(client.models())
