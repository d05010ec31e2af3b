"""A streaming client for OpenAI-compatible servers, built to time tokens, not to be convenient.

One ``StreamClient`` holds one aiohttp session (unbounded connection pool by default, so 500
concurrent streams are 500 connections). ``complete()`` sends one streaming request with
``stream: true, stream_options: {include_usage: true}`` and returns a ``RequestResult``; it never
raises for a server's or network's failure and it never retries: a refused connection, an HTTP
4xx/5xx (with an excerpt of the body), malformed SSE, a stalled or reset stream and a timeout are
all results with ``error = {"type", "message"}``. (aiohttp itself retries only idempotent
methods on a stale keep-alive connection; POST is not one.)

Timestamps are ``time.perf_counter_ns()`` (CLOCK_MONOTONIC on Linux), taken when a read of the
body is handed to the client, before it is parsed; the parse (``StreamParser``) is pure, fed each
read with its time, so what each timing means is tested with injected times:

- ``t_sent_ns``      just before the request is issued (connection set-up is inside TTFT, as users see it)
- ``first_byte_s``   first read of the body
- ``ttft_s``         first SSE data event carrying a choice (the first token)
- ``first_content_s`` first choice with non-empty text
- ``last_token_s``   last choice with non-empty text
- ``end_s``          the stream is finished (``[DONE]``) or failed

All ``*_s`` are seconds after ``t_sent_ns``. Two timeouts apply: ``timeout_s`` bounds the whole
request; ``stall_timeout_s`` bounds the gap between two chunks once the first token has arrived
(before it, a long queue or a long prefill is legitimate and only ``timeout_s`` applies); a stream
is declared stalled after a silence of between 1x and 1.5x ``stall_timeout_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp

from servesize.errors import BadInput, excerpt


def run_async(coro):
    """Run a measurement: on uvloop when it is installed, with the cyclic garbage collector paused.

    With 500 streams in flight, CPython's cyclic collector stalled the event loop for ~10 ms every
    few hundred milliseconds and was the largest term of the TTFT error (benchmarks/bench_client_ttft.py:
    p99 12 ms with it, 2.1 ms without, 1.3 ms without it on uvloop). Collections run explicitly
    between probes and rungs instead (``collect_between``), when nothing is in flight."""
    with paused_gc():
        try:
            import uvloop
        except ImportError:
            return asyncio.run(coro)
        return uvloop.run(coro) if hasattr(uvloop, "run") else asyncio.run(coro)


@contextlib.contextmanager
def paused_gc():
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def collect_between() -> None:
    """A full collection at a quiet moment (no request in flight): keeps memory flat with GC paused."""
    gc.collect()

ERROR_TYPES = (
    "connection_refused", "connect_error", "connect_timeout", "http_error", "malformed_sse", "server_error_event",
    "stall_timeout", "total_timeout", "connection_reset", "truncated_stream", "bad_url", "client_error", "not_openai",
)

NOT_OPENAI = ("not an OpenAI-compatible endpoint: {what} answered an HTML page, not {expected} ({page}); is --url the "
              "API server itself (e.g. http://localhost:8000), not a web UI, a proxy's login page or a dashboard?")


def is_html(text: bytes | str) -> bool:
    """A body that is a web page: its first non-blank character opens a tag (<!DOCTYPE, <html, <head, ...)."""
    head = text.lstrip()[:1]
    return head in (b"<", "<")


def _quantile(values: list[float], q: float) -> float:
    """The q-quantile (0-1) of a list, by the plan's one percentile rule (planning.decode.percentiles: numpy's
    linear interpolation); NaN for an empty list."""
    if not values:
        return float("nan")
    from servesize.percentile import percentiles  # a list: no numpy loads in a measurement's worker

    return percentiles(values, (100.0 * q,))[0]


def summarise(values: list[float]) -> dict | None:
    """n, mean, p50, p95, max of a list of seconds; None when empty."""
    if not values:
        return None
    s = sorted(values)
    return {"n": len(s), "mean_s": sum(s) / len(s), "p50_s": _quantile(s, 0.5), "p95_s": _quantile(s, 0.95), "max_s": s[-1]}


@dataclass
class RequestResult:
    """The outcome of one request. ``error`` is None exactly when the stream completed."""

    id: str
    tags: dict = field(default_factory=dict)
    t_sent_ns: int = 0
    wall_time: float = 0.0
    status: int | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    cached_tokens_reported: bool = False
    completion_tokens: int | None = None
    first_byte_s: float | None = None
    ttft_s: float | None = None
    first_content_s: float | None = None
    last_token_s: float | None = None
    end_s: float | None = None
    chunks: int = 0
    token_events: int = 0  # events that carried token text
    token_reads: int = 0  # distinct reads of the body that brought them (see ``coalesced``)
    itl: dict | None = None
    decode_tok_per_s: float | None = None
    error: dict | None = None
    server: dict | None = None  # x_server timing, test server only
    # with ``keep_chunks``: the time from the send of every event that carried a choice, in order (vLLM's bench
    # client times these: the first is its TTFT, the last its latency, the gaps its ITLs); None otherwise
    chunk_times_s: list[float] | None = None
    # why the usage this server reported cannot be true (more tokens cached than the prompt has), or None;
    # the request itself completed, but its cached_tokens is no evidence of anything
    usage_impossible: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def coalesced(self) -> bool:
        """Its token events came in fewer reads than MIN_READS_PER_EVENT of them: read late, in bursts (a starved
        client host), so the gaps between reads are not the gaps between tokens; its ITL and decode speed are
        withheld (None), never reported as 0 ms and tens of thousands of tokens a second."""
        return self.token_events > 1 and self.token_reads < MIN_READS_PER_EVENT * self.token_events

    @property
    def cached_tokens_or_zero(self) -> int:
        """``cached_tokens``, with a missing field read as 0 (check ``cached_tokens_reported``)."""
        return self.cached_tokens if self.cached_tokens is not None else 0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ok"] = self.ok
        if d["server"] is None:
            del d["server"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> RequestResult:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in names})

    def error_line(self) -> str:
        if self.error is None:
            return ""
        return f"{self.error['type']}: {self.error['message']}"


# A stream's token events are timed by the read that brought them. When the client reads late (its host starved),
# many events arrive in one read and share its time: the gaps read are not the gaps the server sent. A stream whose
# events came in fewer reads than half their number is "coalesced": its ITL and decode speed are withheld. A modelled
# threshold: a server that is read as it sends gives one read per event, with a few pairs merged at most.
MIN_READS_PER_EVENT = 0.5

# vLLM's API server (uvicorn) closes a keep-alive connection after 5 s idle (VLLM_HTTP_TIMEOUT_KEEP_ALIVE, default 5:
# https://github.com/vllm-project/vllm/blob/main/vllm/envs.py). aiohttp keeps an idle connection 15 s by default, so
# a request sent on one the server has just closed fails as a reset, which aiohttp does not retry for a POST, and a
# measurement then refuses its capacity for a failure of the client's own making (seen once in 33 probe requests on a
# starved server). The client lets an idle connection go well before the server does.
CLIENT_KEEPALIVE_S = 2.0
SERVER_KEEPALIVE_DEFAULT_S = 5.0


def json_or_text(text: str) -> Any:
    """A small JSON answer's document, or its text when it is none (not JSON, or an integer past Python's 4,300
    digits): its reader decides what an answer that is not the document it expects means."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested past Python's recursion limit ('[' x 100,000)
        return text


class StreamClient:
    """An aiohttp session against one server. Use as ``async with StreamClient(url) as client``."""

    def __init__(self, base_url: str, model: str | None = None, *, timeout_s: float = 600.0,
                 stall_timeout_s: float = 60.0, connect_timeout_s: float = 10.0, api: str = "completions",
                 max_connections: int = 0):
        if api not in ("completions", "chat"):
            raise BadInput(f"api must be 'completions' or 'chat', not {api!r}")
        url = base_url.rstrip("/")
        if url.endswith("/v1"):
            url = url[:-3]
        if not (url.startswith("http://") or url.startswith("https://")):
            raise BadInput(f"--url {base_url!r} is not an http(s) URL (e.g. http://localhost:8000)")
        self.base_url = url
        self.model = model
        self.timeout_s = timeout_s
        self.stall_timeout_s = stall_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.api = api
        self.max_connections = max_connections
        self.session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> StreamClient:
        connector = aiohttp.TCPConnector(limit=self.max_connections, limit_per_host=0, ttl_dns_cache=300,
                                         keepalive_timeout=CLIENT_KEEPALIVE_S)
        self.session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))
        return self

    async def __aexit__(self, *exc) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None

    def _open_session(self) -> aiohttp.ClientSession:
        """The session ``__aenter__`` opened; a clear error for a client used outside ``async with``."""
        if self.session is None:
            raise RuntimeError(f"StreamClient({self.base_url}) used outside 'async with': no open session")
        return self.session

    # -- small JSON endpoints ---------------------------------------------------------------
    async def get(self, path: str, *, timeout_s: float | None = None) -> tuple[int, str]:
        """(status, body text) of a GET; raises aiohttp/OS errors for the caller to word."""
        t = aiohttp.ClientTimeout(total=timeout_s or self.connect_timeout_s * 3, connect=self.connect_timeout_s)
        async with self._open_session().get(self.base_url + path, timeout=t) as resp:
            return resp.status, await resp.text()

    async def post_json(self, path: str, body: dict, *, timeout_s: float | None = None) -> tuple[int, Any]:
        t = aiohttp.ClientTimeout(total=timeout_s or self.connect_timeout_s * 3, connect=self.connect_timeout_s)
        async with self._open_session().post(self.base_url + path, json=body, timeout=t) as resp:
            return resp.status, json_or_text(await resp.text())

    async def models(self) -> list[dict]:
        """The server's /v1/models entries; BadInput (one line) when the server cannot be reached."""
        try:
            status, text = await self.get("/v1/models")
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise BadInput(f"cannot reach {self.base_url}: {describe_exception(exc)[1]} "
                           "(is the server running, and is --url right?)") from None
        except UnicodeDecodeError as exc:
            raise BadInput(f"{self.base_url}/v1/models answered a body that is not UTF-8 text ({exc.reason} at byte "
                           f"{exc.start}): not an OpenAI model list") from None
        if status != 200:
            raise BadInput(f"{self.base_url}/v1/models answered HTTP {status}: {excerpt(text)}")
        if is_html(text):
            raise BadInput(NOT_OPENAI.format(what=f"{self.base_url}/v1/models", expected="a model list", page=excerpt(text, 80)))
        try:
            data = json.loads(text)["data"]
        except (ValueError, KeyError, TypeError, RecursionError):
            raise BadInput(f"{self.base_url}/v1/models did not return an OpenAI model list: {excerpt(text)}") from None
        if not isinstance(data, list) or not all(isinstance(e, dict) for e in data):
            raise BadInput(f"{self.base_url}/v1/models: its 'data' is {type(data).__name__} {excerpt(json.dumps(data), 80)}, "
                           "not a list of model objects (an OpenAI model list)")
        return data

    async def resolve_model(self, entries: list[dict] | None = None) -> str:
        """``--model`` if given, else the server's first /v1/models entry (``entries``: a listing already fetched)."""
        if entries is None:
            entries = await self.models()
        if self.model is None:
            if not entries:
                raise BadInput(f"{self.base_url}/v1/models lists no model; pass --model")
            model = entries[0].get("id")
            if not isinstance(model, str) or not model:
                raise BadInput(f"{self.base_url}/v1/models: its first entry's 'id' is {excerpt(repr(model), 80)}, not a "
                               "model name; pass --model")
            self.model = model
        return self.model

    # -- the streaming request --------------------------------------------------------------
    def body(self, prompt: str, max_tokens: int, extra: dict | None = None) -> dict:
        body: dict[str, Any] = {"model": self.model, "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
                                "stream_options": {"include_usage": True}}
        if max_tokens > 1:
            body["ignore_eos"] = True  # vLLM: generate exactly max_tokens, so decode is timed on a known length
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        for key, value in (extra or {}).items():  # None removes a field (measure bench sends what vLLM's bench does)
            if value is None:
                body.pop(key, None)
            else:
                body[key] = value
        return body

    async def complete(self, prompt: str, *, max_tokens: int = 1, request_id: str = "", tags: dict | None = None,
                       extra_body: dict | None = None, keep_chunks: bool = False) -> RequestResult:
        """One streaming request; every failure is returned in ``result.error``, never raised."""
        session = self._open_session()
        path = "/v1/chat/completions" if self.api == "chat" else "/v1/completions"
        body = json.dumps(self.body(prompt, max_tokens, extra_body))
        result = RequestResult(id=request_id, tags=dict(tags or {}))
        timeout = aiohttp.ClientTimeout(total=None, connect=self.connect_timeout_s)
        result.wall_time = time.time()
        t0 = result.t_sent_ns = time.perf_counter_ns()
        parser = StreamParser(result, t0, chat=self.api == "chat", keep_chunks=keep_chunks)
        total_cm = asyncio.timeout(self.timeout_s)
        stall_cm = asyncio.timeout(None)
        try:
            async with total_cm:
                async with session.post(self.base_url + path, data=body, timeout=timeout,
                                             headers={"Content-Type": "application/json", "Accept": "text/event-stream"}) as resp:
                    result.status = resp.status
                    if resp.status >= 400:
                        text = await resp.content.read(2000)
                        result.error = {"type": "http_error", "message": f"HTTP {resp.status}: {_text(text)}"}
                        result.end_s = (time.perf_counter_ns() - t0) / 1e9
                        return result
                    async with stall_cm:
                        await self._read_stream(resp, parser, stall_cm)
        except TimeoutError as exc:
            if isinstance(exc, aiohttp.ConnectionTimeoutError):
                result.error = {"type": "connect_timeout", "message": f"no connection within {self.connect_timeout_s:g} s"}
            elif stall_cm.expired() and not total_cm.expired():
                result.error = {"type": "stall_timeout",
                                "message": f"stream stalled: no chunk for {self.stall_timeout_s:g} s after {result.chunks} token chunks"}
            else:
                result.error = {"type": "total_timeout", "message": f"request not finished within {self.timeout_s:g} s"}
        except (aiohttp.ClientError, OSError) as exc:
            kind, message = describe_exception(exc)
            if kind == "connection_reset" and result.first_byte_s is not None:
                message = f"connection reset after {result.chunks} token chunks: {message}"
            result.error = {"type": kind, "message": message}
        result.end_s = (time.perf_counter_ns() - t0) / 1e9
        parser.finish()
        return result

    async def _read_stream(self, resp, parser: StreamParser, stall) -> None:
        """Feed the body to ``parser`` as it arrives, each read stamped, and keep the stall deadline ahead.

        The stall deadline moves lazily (a timer reset per chunk would cost more than the parse): it is
        pushed to now + 1.5 x stall whenever half a stall period has passed since the last push, so a
        stream is declared stalled after a silence between 1x and 1.5x stall_timeout_s. Before the
        first token only ``timeout_s`` applies."""
        loop = asyncio.get_running_loop()
        stall_s = self.stall_timeout_s
        half_stall_ns = int(stall_s * 1e9 / 2)
        next_push = None  # armed by the first token
        async for chunk in resp.content.iter_any():  # one wake-up per socket read, not per line
            now = time.perf_counter_ns()
            if next_push is not None and now >= next_push:
                stall.reschedule(loop.time() + 1.5 * stall_s)
                next_push = now + half_stall_ns
            if not parser.feed(chunk, now):
                return
            if next_push is None and parser.started:
                stall.reschedule(loop.time() + 1.5 * stall_s)
                next_push = now + half_stall_ns
        parser.end_of_body()


MAX_SSE_LINE_BYTES = 16 << 20  # one SSE line: a token event is ~200 bytes, a usage event ~300
MAX_SSE_EVENT_LINES = 10_000  # data lines in one event (OpenAI servers send one)


class StreamParser:
    """An SSE body, read into a ``RequestResult``: lines -> events -> tokens, usage and timings.

    Pure: ``feed(chunk, now_ns)`` takes one read of the body with the time it was read (the client
    passes ``perf_counter_ns()``; a test passes whatever times it likes), so what each timing means is
    decided here and can be checked exactly. An event's time is that of the read that completed its
    first ``data:`` line (a line split over two reads is complete at the second). ``ttft_s`` is the
    first event carrying a choice, ``first_content_s`` / ``last_token_s`` the first and last with
    non-empty text; ``finish()`` derives inter-token latency and decode speed from the token times.
    Every malformed input is an ``error`` on the result, never an exception."""

    __slots__ = ("result", "t0", "chat", "token_ns", "choice_ns", "started", "done", "_data", "_t_event", "_pending",
                 "_sniffed")

    def __init__(self, result: RequestResult, t0_ns: int, *, chat: bool = False, keep_chunks: bool = False):
        self.result = result
        self.t0 = t0_ns
        self.chat = chat
        self.token_ns: list[int] = []  # read time of each event with non-empty text
        self.choice_ns: list[int] | None = [] if keep_chunks else None  # ... of each event with a choice
        self.started = False  # an event with a choice has been seen (the first token)
        self.done = False  # [DONE] seen
        self._data: list[bytes] = []  # data lines of the event being assembled
        self._t_event = 0
        self._pending = b""  # an incomplete last line
        self._sniffed = False  # the body's first non-blank bytes have been looked at (an HTML page is no stream)

    def _fail(self, kind: str, message: str) -> bool:
        self.result.error = {"type": kind, "message": message}
        return False

    def feed(self, chunk: bytes, now_ns: int) -> bool:
        """One read of the body; False once an error has been recorded (the stream must end)."""
        if self.result.first_byte_s is None:
            self.result.first_byte_s = (now_ns - self.t0) / 1e9
        self._pending += chunk
        if b"\n" not in chunk:
            if len(self._pending) > MAX_SSE_LINE_BYTES:
                if not self._sniffed and not self._sniff(final=True):
                    return False
                return self._fail("malformed_sse", f"an SSE line longer than {MAX_SSE_LINE_BYTES:,} bytes: not a token stream")
            return True
        if not self._sniffed and not self._sniff(final=False):
            return False
        lines = self._pending.split(b"\n")
        self._pending = lines.pop()
        for raw in lines:
            line = raw.rstrip(b"\r")
            if line:
                if not self._field(line, now_ns):
                    return False
            elif self._data and not self._dispatch():
                return False
        return True

    def _sniff(self, final: bool) -> bool:
        """Look once at the body's first non-blank line (once it is complete, or the body has ended): an HTML
        page (a web UI or a proxy's login page served with HTTP 200) or a single JSON document is not an SSE
        stream, and says so. Deciding on the whole line makes the verdict the same however the body was split."""
        head = self._pending.lstrip()
        if not head or (b"\n" not in head and not final):
            return True
        self._sniffed = True
        line = head.split(b"\n", 1)[0][:200]
        if is_html(line):
            return self._fail("not_openai", NOT_OPENAI.format(what="the completions endpoint", expected="an SSE stream",
                                                              page=_text(line)))
        if line[:1] in (b"{", b"["):
            return self._fail("malformed_sse", f"the answer is a JSON document, not an SSE stream (did the server ignore "
                                               f"stream: true?): {_text(line)}")
        return True

    def _field(self, line: bytes, now_ns: int) -> bool:
        if line.startswith(b"data:"):
            if not self._data:
                self._t_event = now_ns
            self._data.append(line[6:] if line[5:6] == b" " else line[5:])
            if len(self._data) > MAX_SSE_EVENT_LINES:
                return self._fail("malformed_sse", f"an SSE event of more than {MAX_SSE_EVENT_LINES:,} data lines: not a token stream")
            return True
        if line.startswith(b":") or line.split(b":", 1)[0] in (b"event", b"id", b"retry"):
            return True  # a comment or a field the harness does not use
        return self._fail("malformed_sse", f"not an SSE line: {_text(line)}")

    def _dispatch(self) -> bool:
        """An empty line ends an event: decode it and take what it carries."""
        data, self._data = self._data, []
        payload = data[0] if len(data) == 1 else b"\n".join(data)
        if payload == b"[DONE]":
            self.done = True
            return True
        try:
            event = json.loads(payload)
        except (ValueError, RecursionError):  # RecursionError: nested past Python's recursion limit
            return self._fail("malformed_sse", f"SSE data is not JSON: {_text(payload)}")
        if not isinstance(event, dict):
            return self._fail("malformed_sse", f"SSE data is not a JSON object: {_text(payload)}")
        if "error" in event and not event.get("choices"):
            err = event["error"]
            msg = err.get("message", err) if isinstance(err, dict) else err
            return self._fail("server_error_event", f"server sent an error mid-stream: {excerpt(str(msg))}")
        choices = event.get("choices")
        usage = event.get("usage")
        if (choices and not (isinstance(choices, list) and isinstance(choices[0], dict))) or \
                (usage and not isinstance(usage, dict)):
            return self._fail("malformed_sse", f"unexpected event shape: {_text(payload)}")
        if choices and not self._choice(choices[0], event):
            return False
        return not usage or self._usage(usage)

    def _choice(self, choice: dict, event: dict) -> bool:
        if self.chat:
            delta = choice.get("delta") or {}
            text = delta.get("content") if isinstance(delta, dict) else None
        else:
            text = choice.get("text")
        if text is not None and not isinstance(text, str):
            return self._fail("malformed_sse", f"token text is not a string: {excerpt(str(text))}")
        r = self.result
        r.chunks += 1
        if self.choice_ns is not None:
            self.choice_ns.append(self._t_event)
        if not self.started:
            self.started = True
            r.ttft_s = (self._t_event - self.t0) / 1e9
            if "x_server" in event:
                r.server = event["x_server"]
        if text:
            self.token_ns.append(self._t_event)
        return True

    def _usage(self, usage: dict) -> bool:
        r = self.result
        try:
            r.prompt_tokens = _count(usage.get("prompt_tokens"))
            r.completion_tokens = _count(usage.get("completion_tokens"))
            details = usage.get("prompt_tokens_details")
            if isinstance(details, dict) and details.get("cached_tokens") is not None:
                r.cached_tokens = _count(details["cached_tokens"])
                r.cached_tokens_reported = True
        except (TypeError, ValueError):
            return self._fail("malformed_sse", f"usage is not token counts: {excerpt(str(usage))}")
        if r.cached_tokens is not None and r.prompt_tokens is not None and r.cached_tokens > r.prompt_tokens:
            r.usage_impossible = f"{r.cached_tokens:,} cached tokens for a prompt of {r.prompt_tokens:,}"
        return True

    def end_of_body(self) -> None:
        """The body ended: without [DONE] (and no earlier error) the stream was cut short."""
        if self.result.error is None and not self._sniffed and not self._sniff(final=True):
            return
        if self.result.error is None and not self.done:
            self._fail("truncated_stream", f"stream ended before [DONE] after {len(self.token_ns)} token chunks")

    def finish(self) -> None:
        """Token timings from the token read times: first and last token, ITL summary, decode tok/s."""
        r, token_ns, t0 = self.result, self.token_ns, self.t0
        if self.choice_ns is not None:
            r.chunk_times_s = [(t - t0) / 1e9 for t in self.choice_ns]
        if not token_ns:
            return
        r.first_content_s = (token_ns[0] - t0) / 1e9
        r.last_token_s = (token_ns[-1] - t0) / 1e9
        r.token_events, r.token_reads = len(token_ns), len(set(token_ns))
        if r.coalesced:
            return  # the reads do not time the tokens: no ITL, no decode speed
        r.itl = summarise([(b - a) / 1e9 for a, b in zip(token_ns, token_ns[1:])])
        n_tokens = r.completion_tokens if r.completion_tokens else len(token_ns)
        span = (token_ns[-1] - token_ns[0]) / 1e9
        if n_tokens > 1 and span > 0:
            r.decode_tok_per_s = (n_tokens - 1) / span


def _text(raw: bytes) -> str:
    return excerpt(raw.decode("utf-8", "replace"))


MAX_USAGE_COUNT = 2**63 - 1  # a token count a usage event may hold (Infinity, 1e400 or 10**400 are no count)


def _count(value) -> int | None:
    """A usage token count: a whole number in [0, MAX_USAGE_COUNT] (an integral float is taken), else ValueError."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_USAGE_COUNT \
            or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(value)
    return int(value)


def describe_exception(exc: BaseException) -> tuple[str, str]:
    """(error type, one-line message) for a network exception."""
    if isinstance(exc, aiohttp.InvalidURL):
        return "bad_url", f"invalid URL {exc}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        os_err = getattr(exc, "os_error", None)
        if isinstance(os_err, ConnectionRefusedError) or getattr(os_err, "errno", None) == errno.ECONNREFUSED:
            return "connection_refused", f"connection refused by {exc.host}:{exc.port}"
        return "connect_error", f"cannot connect to {exc.host}:{exc.port}: {os_err or exc}"
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, ConnectionResetError)):
        return "connection_reset", f"{type(exc).__name__}: {exc}".rstrip(": ")
    if isinstance(exc, aiohttp.ClientOSError) and getattr(exc, "errno", None) in (errno.ECONNRESET, errno.EPIPE, None):
        return "connection_reset", str(exc) or "the connection broke while the request was in flight"
    if isinstance(exc, ConnectionRefusedError):
        return "connection_refused", str(exc)
    return "client_error", f"{type(exc).__name__}: {exc}"
