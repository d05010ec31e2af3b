"""What the explorer's server needs before the engine is loaded: the worker pools, JSON in and out,
and the body limit. Nothing here imports the library, so `servesize serve` answers its first page
while the engine is still being imported."""

from __future__ import annotations

import asyncio
import contextvars
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aiohttp import web

from servesize.errors import BadInput
from servesize.limits import parse_json

MAX_BODY_BYTES = 8 << 20     # a request body (a vLLM log or a measure record is the largest)
NO_FILES = ("the explorer reads no file and makes no network request a request names: give a catalogue name, "
            "or upload the content")

FAST: web.AppKey[ThreadPoolExecutor] = web.AppKey("fast", ThreadPoolExecutor)
HEAVY: web.AppKey[ThreadPoolExecutor] = web.AppKey("heavy", ThreadPoolExecutor)
FLEET: web.AppKey[ThreadPoolExecutor] = web.AppKey("fleet", ThreadPoolExecutor)
HOSTS: web.AppKey[tuple[str, ...]] = web.AppKey("hosts", tuple)
UPLOADS: web.AppKey[ThreadPoolExecutor] = web.AppKey("uploads", ThreadPoolExecutor)


def json_response(data: Any, status: int = 200) -> web.Response:
    text = json.dumps(data, allow_nan=False, separators=(",", ":"))
    return web.Response(text=text, status=status, content_type="application/json")


async def read_body(request: web.Request) -> Any:
    """The request's JSON (an empty body is {}); one line when it is not JSON."""
    try:
        text = await request.text()
    except UnicodeDecodeError:
        raise BadInput("the request body is not UTF-8 text") from None
    return parse_json(text, "the request body") if text.strip() else {}


async def in_worker(request: web.Request, pool: web.AppKey, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on one of the app's worker threads, in the request's context: the guard middleware's
    ``files_forbidden`` holds there too (an executor does not carry contextvars by itself)."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(request.app[pool], contextvars.copy_context().run, fn, *args)


async def compute(request: web.Request, pool: web.AppKey, work: Callable[[], Any]) -> web.Response:
    """Run ``work`` on a worker thread; a chart or fleet request whose client has gone (a newer one superseded
    it) is skipped."""

    def gone() -> bool:
        transport = request.transport
        return transport is None or transport.is_closing()

    def run() -> Any:
        if pool is not FAST and gone():
            return None
        return work()

    result = await in_worker(request, pool, run)
    return json_response(result if result is not None else {"skipped": True})
