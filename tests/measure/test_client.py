"""The streaming client against the test server: timings, usage, and every failure as a result."""

import asyncio

import pytest

from servesize.measure.client import StreamClient, summarise
from servesize.measure.testserver import Fault, ServerConfig, TestServer

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
    assert cold.chunks == 5 and cold.itl["n"] == 4
    assert cold.first_byte_s <= cold.ttft_s <= cold.first_content_s <= cold.last_token_s <= cold.end_s


def test_measured_ttft_is_the_injected_ttft_within_a_loose_bound():
    config = ServerConfig(ttft_base_s=0.05, ttft_per_token_s=0.0005)
    (cold, warm), server = complete(config, times=2)
    injected_cold = 0.05 + 0.0005 * 200
    injected_warm = 0.05 + 0.0005 * (200 - 192)
    assert injected_cold <= cold.ttft_s < injected_cold + 0.05
    assert injected_warm <= warm.ttft_s < injected_warm + 0.05


def test_a_missing_cached_tokens_field_is_none_and_read_as_zero_only_by_the_flagged_accessor():
    (r,), _ = complete(ServerConfig(report_cached_tokens=False))
    assert r.ok and r.cached_tokens is None and not r.cached_tokens_reported
    assert r.cached_tokens_or_zero == 0


def test_chat_completions_stream_too():
    (r,), _ = complete(ServerConfig(), api="chat")
    assert r.ok and r.first_content_s is not None and r.completion_tokens == 5


@pytest.mark.parametrize("fault, error_type", [
    (Fault("status", status=500), "http_error"),
    (Fault("status", status=400), "http_error"),
    (Fault("malformed"), "malformed_sse"),
    (Fault("stall", stall_s=1), "stall_timeout"),
    (Fault("reset"), "connection_reset"),
])
def test_every_server_failure_is_a_result_with_a_typed_error_never_an_exception(fault, error_type):
    (r,), _ = complete(ServerConfig(faults=[fault], itl_s=0.01), stall_timeout_s=0.3, timeout_s=10)
    assert not r.ok
    assert r.error["type"] == error_type
    assert r.error["message"]


def test_an_http_error_carries_an_excerpt_of_the_body():
    (r,), _ = complete(ServerConfig(faults=[Fault("status", status=503)]))
    assert r.status == 503 and "HTTP 503" in r.error["message"] and "injected failure" in r.error["message"]


def test_a_total_timeout_before_the_first_token_is_not_called_a_stall():
    (r,), _ = complete(ServerConfig(ttft_base_s=2.0), timeout_s=0.3, stall_timeout_s=0.1)
    assert r.error["type"] == "total_timeout"


def test_a_refused_connection_is_a_result():
    async def go():
        async with StreamClient("http://127.0.0.1:9") as client:
            return await client.complete("hello", request_id="x")
    r = asyncio.run(go())
    assert r.error["type"] == "connection_refused"


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
