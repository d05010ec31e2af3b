"""What the explorer's server needs before the engine is loaded: the worker pools, JSON in and out,
and the body limit. Nothing here imports the library, so `servesize serve` answers its first page
while the engine is still being imported."""

from __future__ import annotations

import asyncio
import contextvars
import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aiohttp import web

from servesize.errors import BadInput
from servesize.limits import parse_json

MAX_BODY_BYTES = 8 << 20     # an upload's body (a pasted vLLM log or a measure record), the most any request may send
FORM_BODY_BYTES = 1 << 20    # any other request's: the page's whole state with an uploaded config.json is ~20 KB
NO_FILES = ("the explorer reads no file and makes no network request a request names: give a catalogue name, "
            "or upload the content")

FAST: web.AppKey[ThreadPoolExecutor] = web.AppKey("fast", ThreadPoolExecutor)
HEAVY: web.AppKey[ThreadPoolExecutor] = web.AppKey("heavy", ThreadPoolExecutor)
# the searches a page starts on demand, each with its progress and Cancel: the fleet search, the engine check
FLEET: web.AppKey[ThreadPoolExecutor] = web.AppKey("fleet", ThreadPoolExecutor)
HOSTS: web.AppKey[tuple[str, ...]] = web.AppKey("hosts", tuple)
UPLOADS: web.AppKey[ThreadPoolExecutor] = web.AppKey("uploads", ThreadPoolExecutor)

# -- long requests: what each is doing, for the page to show (GET /api/progress/JOB) ----------------------------

JOB_HEADER = "X-Servesize-Job"   # the page names its long request; GET /api/progress/<name> says where it is
MAX_JOBS = 64                    # jobs remembered; the oldest is forgotten first
_JOB_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class Cancelled(Exception):
    """The page that asked for this work has gone (its Cancel, or a newer request): stop at the next stage."""


class Job:
    """One long request: the stage the library last reported, how many so far, and when each began (``clock``:
    seconds, monotonic; injected by tests). ``say`` is the progress callback the library calls."""

    def __init__(self, clock: Callable[[], float], gone: Callable[[], bool] = lambda: False):
        self.clock, self.gone = clock, gone
        self.started = self.stage_started = clock()
        self.stage, self.stages, self.state = "waiting for a worker", 0, "queued"

    def say(self, line: str) -> None:
        if self.gone():
            self.state = "cancelled"
            raise Cancelled(line)
        self.stage, self.stages, self.stage_started, self.state = line, self.stages + 1, self.clock(), "running"

    def to_dict(self) -> dict:
        now = self.clock()
        elapsed, stage = now - self.started, now - self.stage_started
        return {"stage": self.stage, "stages": self.stages, "state": self.state, "elapsed_s": round(elapsed, 1),
                "stage_elapsed_s": round(stage, 1),
                "text": f"{self.stage} ({stage:.1f} s in this stage, {elapsed:.1f} s in all)"}


class Jobs:
    """The jobs of one app, bounded (MAX_JOBS), shared by the event loop and the workers."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock, self._jobs, self._lock = clock, OrderedDict[str, Job](), threading.Lock()

    def start(self, name: str | None, gone: Callable[[], bool]) -> Job:
        job = Job(self.clock, gone)
        if name is not None and _JOB_NAME.fullmatch(name):
            with self._lock:
                self._jobs[name] = job
                while len(self._jobs) > MAX_JOBS:
                    self._jobs.popitem(last=False)
        return job

    def get(self, name: str) -> Job | None:
        with self._lock:
            return self._jobs.get(name)


JOBS: web.AppKey[Jobs] = web.AppKey("jobs", Jobs)


def json_response(data: Any, status: int = 200) -> web.Response:
    text = json.dumps(data, allow_nan=False, separators=(",", ":"))
    return web.Response(text=text, status=status, content_type="application/json")


class BodyTooLarge(Exception):
    """A body past what its endpoint takes (``limit`` bytes); the guard answers 413 naming the limit."""

    def __init__(self, limit: int):
        super().__init__(limit)
        self.limit = limit


async def read_body(request: web.Request, *, upload: bool = False) -> Any:
    """The request's JSON (an empty body is {}); one line when it is not JSON. A form takes ``FORM_BODY_BYTES``; an
    upload (``upload``: a log or a record) up to ``MAX_BODY_BYTES``, parsed on the uploads' worker, so that eight
    7 MiB bodies parsed at once never hold up the event loop a verdict is answered on."""
    limit = MAX_BODY_BYTES if upload else FORM_BODY_BYTES
    if request.content_length is not None and request.content_length > limit:
        raise BodyTooLarge(limit)
    try:
        raw = await request.read()
        if len(raw) > limit:  # a chunked body states no length
            raise BodyTooLarge(limit)
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput("the request body is not UTF-8 text") from None
    if not text.strip():
        return {}
    if upload:
        return await in_worker(request, UPLOADS, parse_json, text, "the request body")
    return parse_json(text, "the request body")


async def in_worker(request: web.Request, pool: web.AppKey, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on one of the app's worker threads, in the request's context: the guard middleware's
    ``files_forbidden`` holds there too (an executor does not carry contextvars by itself)."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(request.app[pool], contextvars.copy_context().run, fn, *args)


def _gone(request: web.Request) -> Callable[[], bool]:
    def gone() -> bool:
        transport = request.transport
        return transport is None or transport.is_closing()

    return gone


def start_job(request: web.Request) -> Job:
    """The job of a long request, under the name its page gave (``JOB_HEADER``), cancelled when the page goes."""
    return request.app[JOBS].start(request.headers.get(JOB_HEADER), _gone(request))


async def compute(request: web.Request, pool: web.AppKey, work: Callable[[], Any], job: Job | None = None) -> web.Response:
    """Run ``work`` on a worker thread; a chart or fleet request whose client has gone (a newer one superseded
    it, or its Cancel) is skipped, and a ``job`` whose client goes stops at the next stage it reports."""
    gone = _gone(request)

    def run() -> Any:
        if pool is not FAST and gone():
            return None
        try:
            return work()
        except Cancelled:
            return None
        finally:
            if job is not None and job.state != "cancelled":
                job.state = "done"

    result = await in_worker(request, pool, run)
    return json_response(result if result is not None else {"skipped": True})
