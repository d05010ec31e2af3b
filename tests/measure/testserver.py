"""A small OpenAI-compatible server with a known KV pool, for testing the harness against ground truth.

It speaks the parts of vLLM's API the harness uses: ``/v1/completions`` and ``/v1/chat/completions``
(streaming SSE with ``stream_options.include_usage``), ``/v1/models``, ``/tokenize``, ``/metrics``
(Prometheus text under vLLM's names) and ``/health``.

Tokenization is whitespace: one word is one token. The KV pool is an LRU cache of
``capacity_tokens // block_size`` blocks, each named by the hash of its chain of token ids, as
vLLM's prefix cache names them. Like vLLM, only full blocks are cached and the last prompt token is
always recomputed, so a prompt of S tokens can hit at most ``(S - 1) // block_size`` blocks.

Time to first token is injected: ``ttft_base_s + ttft_per_token_s * uncached_tokens``; then one
token every ``itl_s``. Faults can be injected (HTTP status, malformed SSE, a stall, a reset
connection) and each endpoint can be switched off to test what the harness does without it.

A lying server (``lie``) reports cache counts its own cache and timing contradict: ``over_prompt``
reports ``lie_factor`` x the prompt as cached (more than the prompt: impossible); ``claim_warm`` reports
every cacheable token as cached while the TTFT is still the true one (a cold request claimed warm);
``cached_fn`` replaces the count with any function of (request index, prompt tokens, true cached) (the
fuzz suite's generator). ``lie_metrics`` makes /metrics' hit counter add up the lies too.

Every completion is logged (``server.log``: prompt and cached tokens, the TTFT injected) with the
server's own ``perf_counter_ns`` stamps: received, first token sent, last token sent. Tests compare a
client's timestamps with these, which holds however loaded the machine is (a client cannot see a
chunk before the server wrote it), instead of against a wall-clock window. Stopping the server ends
the streams still in flight, so a test can inject delays far longer than it waits.

Bind is always 127.0.0.1, port 0 (a free port) unless told otherwise.

    with TestServer(ServerConfig(capacity_tokens=4096)) as server:   # background thread
        url = server.url
    async with TestServer(...) as server:                               # same event loop
        ...
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Fault:
    """One injected failure. ``kind``: 'status' | 'malformed' | 'stall' | 'reset' | 'html' | 'die'.

    Faults apply to completion requests numbered ``after`` (0-based) onwards, ``times`` of them
    (None: all). Mid-stream faults ('malformed', 'stall', 'reset') strike after ``at_chunk`` chunks.
    'html' answers HTTP 200 with a web page (a proxy's login page, a web UI on the wrong port). 'die'
    kills the server at that request: it stops listening (new connections are refused), this request and
    every later one on a connection already open are cut (reset), and so is every other endpoint; the
    requests received before it are answered in full, so what a test counts does not depend on timing.
    """

    kind: str
    status: int = 500
    after: int = 0
    times: int | None = None
    at_chunk: int = 1
    stall_s: float = 30.0


@dataclass
class ServerConfig:
    capacity_tokens: int = 4096
    block_size: int = 16
    ttft_base_s: float = 0.002
    ttft_per_token_s: float = 0.00005
    itl_s: float = 0.001
    burst: bool = False  # every token of a stream in one write (what a client on a starved host reads: one burst)
    model: str = "servesize-test"
    max_model_len: int = 1 << 20
    report_cached_tokens: bool = True  # vLLM: --enable-prompt-tokens-details
    omit_zero_cached: bool = False  # some vLLM releases leave prompt_tokens_details out when nothing was cached
    metrics: bool = True
    metrics_names: str = "v1"  # 'v1' (vllm:prefix_cache_*) or 'legacy' (vllm:gpu_prefix_cache_*)
    tokenize: bool = True
    eviction: str = "lru"  # 'lru' (head block oldest) or 'tail_first' (vLLM frees a request's tail first)
    published_blocks: int | None = None  # num_gpu_blocks in cache_config_info (default: the true count)
    faults: list[Fault] = field(default_factory=list)
    timing: bool = False  # add server-side timestamps (x_server) to the first chunk
    html_models: bool = False  # /v1/models answers an HTML page with HTTP 200 (a web UI, not the API server)
    lie: str | None = None  # None | 'over_prompt' | 'claim_warm': the cached_tokens reported (see the module docstring)
    lie_factor: float = 2.0  # over_prompt: cached_tokens reported = this x the prompt's tokens
    lie_metrics: bool = False  # /metrics' prefix-cache hits count the reported (lying) figure, not the true one
    cached_fn: Any = None  # (index, prompt_tokens, true_cached) -> the value reported as cached_tokens (any JSON value)
    # hostile answers (test_hostile_server.py): None = the honest one
    metrics_body: bytes | None = None  # /metrics answers these bytes
    config_labels: dict | None = None  # cache_config_info labels replaced (e.g. {"block_size": "inf"})
    models_body: bytes | None = None  # /v1/models answers these bytes
    tokenize_count: Any = "honest"  # /tokenize answers this (any JSON value, null too) as its count; 'honest': the true one
    tokenize_hangs: bool = False  # /tokenize never answers (until the server stops)
    usage_prompt_tokens: Any = None  # usage.prompt_tokens reported for every prompt, whatever its length
    # load arriving mid-run: from the completion of this index on, every first token takes at least this long, warm
    # or cold (a host whose cores another job takes): (index, seconds); None: never
    ttft_floor_from: tuple[int, float] | None = None

    def reported_cached(self, index: int, prompt_tokens: int, cached: int) -> Any:
        """What the server says was cached: the truth, unless it lies."""
        if self.cached_fn is not None:
            return self.cached_fn(index, prompt_tokens, cached)
        if self.lie == "over_prompt":
            return int(self.lie_factor * prompt_tokens)
        if self.lie == "claim_warm":
            return max(0, (prompt_tokens - 1) // self.block_size * self.block_size)
        if self.lie is not None:
            raise ValueError(f"lie must be 'over_prompt' or 'claim_warm', not {self.lie!r}")
        return cached

    def ttft_s(self, uncached_tokens: int, index: int = 0) -> float:
        ttft = self.ttft_base_s + self.ttft_per_token_s * uncached_tokens
        if self.ttft_floor_from is not None and index >= self.ttft_floor_from[0]:
            ttft = max(ttft, self.ttft_floor_from[1])
        return ttft

    @property
    def capacity_blocks(self) -> int:
        return self.capacity_tokens // self.block_size


# A server that answers at once: no injected TTFT nor ITL. For runs decided by the server's own counts
# (cached_tokens, /metrics) or by request counts, where the injected delays are only waiting: with no prefill
# to skip, a hit does not show in the TTFT (measure pool's TTFT check says so), and at the defaults' 28 ms cold
# prefill the counts were not checked against TTFT either (measure pool: REFUTE_RESOLVABLE_S).
INSTANT = dict(ttft_base_s=0.0, ttft_per_token_s=0.0, itl_s=0.0)

HTML_PAGE = ("<!DOCTYPE html>\n<html><head><title>Sign in</title></head>\n<body><form action=\"/login\">"
             "<input name=\"user\"></form></body></html>\n")


class BlockCache:
    """LRU over block-chain hashes; ``admit`` returns the tokens served from cache."""

    def __init__(self, capacity_blocks: int, block_size: int, eviction: str = "lru"):
        if eviction not in ("lru", "tail_first"):
            raise ValueError(f"eviction must be 'lru' or 'tail_first', not {eviction!r}")
        self.capacity_blocks = capacity_blocks
        self.block_size = block_size
        self.eviction = eviction
        self.blocks: OrderedDict[int, None] = OrderedDict()  # oldest first

    def hashes(self, token_ids: list) -> list[int]:
        out, parent, b = [], 0, self.block_size
        for i in range(len(token_ids) // b):
            parent = hash((parent, tuple(token_ids[i * b:(i + 1) * b])))
            out.append(parent)
        return out

    def admit(self, token_ids: list) -> int:
        chain = self.hashes(token_ids)
        hit_limit = (len(token_ids) - 1) // self.block_size if token_ids else 0
        hit = 0
        for h in chain[:hit_limit]:
            if h not in self.blocks:
                break
            hit += 1
        for h in chain[:hit]:  # touch the hits first so this request never evicts its own hits
            self.blocks.move_to_end(h)
        order = chain if self.eviction == "lru" else list(reversed(chain))
        for h in order:
            if h in self.blocks:
                self.blocks.move_to_end(h)
                continue
            if self.capacity_blocks <= 0:
                break
            while len(self.blocks) >= self.capacity_blocks:
                self.blocks.popitem(last=False)
            self.blocks[h] = None
        return hit * self.block_size


class TestServer:
    """The server; start it in a background thread (``with``) or in the running loop (``async with``)."""

    __test__ = False  # not a pytest class

    def __init__(self, config: ServerConfig | None = None, *, host: str = "127.0.0.1", port: int = 0, **overrides):
        self.config = config or ServerConfig(**overrides)
        if config is not None and overrides:
            for k, v in overrides.items():
                setattr(self.config, k, v)
        self.host, self.port = host, port
        self.cache = BlockCache(self.config.capacity_blocks, self.config.block_size, self.config.eviction)
        self.vocab: dict[str, int] = {}
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.completions = 0  # completion requests received
        self.models_served = 0  # /v1/models requests received
        self.log: list[dict] = []  # per request: prompt_tokens, cached_tokens, injected ttft
        self.in_flight = 0
        self.peak_in_flight = 0  # the most completions streaming at once
        self.dead = False  # a 'die' fault struck: the server answers nothing more
        self._handlers: set[asyncio.Task] = set()  # handlers of the completions in flight, ended at stop
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._dead_middleware])
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        if self.config.tokenize:
            app.router.add_post("/tokenize", self._tokenize)
        if self.config.metrics:
            app.router.add_get("/metrics", self._metrics)
        return app

    async def start_async(self) -> str:
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=2048)
        await site.start()
        bound = self._runner.addresses  # the site's sockets' names: (host, port) for a TCP site
        if not bound:
            raise RuntimeError(f"the test server's site on {self.host}:{self.port} started without a listening socket")
        self.port = bound[0][1]
        return self.url

    async def stop_async(self) -> None:
        # A stopped server answers no more: completions still in flight (a long injected TTFT or stall
        # whose client has given up) end now, instead of holding the shutdown until their delays pass.
        for task in list(self._handlers):
            task.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> TestServer:
        await self.start_async()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop_async()

    def start(self) -> str:
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            # made with the loop, so stop() can always reach it: a stop() during a start slower than
            # start()'s wait ends the server as soon as it is up, and one after a failed start is a no-op
            stopping = asyncio.Event()
            self._loop, self._stopping = loop, stopping
            try:
                loop.run_until_complete(self.start_async())
            except BaseException as exc:  # noqa: BLE001 - handed to the starting thread
                failure.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_until_complete(stopping.wait())
            loop.run_until_complete(self.stop_async())
            loop.close()

        self._thread = threading.Thread(target=serve, name="servesize-testserver", daemon=True)
        self._thread.start()
        ready.wait(10)
        if failure:
            raise failure[0]
        return self.url

    def stop(self) -> None:
        if self._thread is None or self._loop is None or self._stopping is None:
            return
        self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(10)
        self._thread = None

    def __enter__(self) -> TestServer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- helpers ---------------------------------------------------------------------------
    def _ids(self, text: str) -> list[int]:
        vocab = self.vocab
        return [vocab.setdefault(w, len(vocab)) for w in text.split()]

    def _fault(self, index: int) -> Fault | None:
        for f in self.config.faults:
            if index >= f.after and (f.times is None or index < f.after + f.times):
                return f
        return None

    @staticmethod
    def _error(status: int, message: str) -> web.Response:
        kind = "BadRequestError" if status < 500 else "InternalServerError"
        return web.json_response({"object": "error", "message": message, "type": kind, "param": None, "code": status}, status=status)

    # -- endpoints -------------------------------------------------------------------------
    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _models(self, request: web.Request) -> web.Response:
        c = self.config
        self.models_served += 1
        if c.html_models:
            return web.Response(status=200, text=HTML_PAGE, content_type="text/html")
        if c.models_body is not None:
            return web.Response(status=200, body=c.models_body, content_type="application/json")
        return web.json_response({"object": "list", "data": [
            {"id": c.model, "object": "model", "owned_by": "servesize", "max_model_len": c.max_model_len}]})

    async def _tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        text = body.get("prompt")
        if text is None and "messages" in body:
            text = " ".join(m.get("content", "") for m in body["messages"])
        ids = self._ids(text or "")
        if self.config.tokenize_hangs:
            task = asyncio.current_task()
            assert task is not None
            self._handlers.add(task)  # ended by stop
            await asyncio.Event().wait()
        count = len(ids) if self.config.tokenize_count == "honest" else self.config.tokenize_count
        return web.Response(text=json.dumps({"count": count, "max_model_len": self.config.max_model_len, "tokens": ids}),
                            content_type="application/json")

    async def _metrics(self, request: web.Request) -> web.Response:
        c = self.config
        if c.metrics_body is not None:
            return web.Response(body=c.metrics_body, content_type="text/plain")
        labels = f'engine="0",model_name="{c.model}"'
        if c.metrics_names == "legacy":
            q, h, usage = "vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total", "vllm:gpu_cache_usage_perc"
        else:
            q, h, usage = "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:kv_cache_usage_perc"
        blocks = c.published_blocks if c.published_blocks is not None else c.capacity_blocks
        config = {"block_size": c.block_size, "num_gpu_blocks": blocks, **(c.config_labels or {})}
        used = len(self.cache.blocks) / c.capacity_blocks if c.capacity_blocks else 0.0
        lines = [
            f"# HELP {q[:-6]} Prefix cache queries, in terms of number of queried tokens.",
            f"# TYPE {q[:-6]} counter",
            f"{q}{{{labels}}} {float(self.prefix_queries)}",
            f"# TYPE {h[:-6]} counter",
            f"{h}{{{labels}}} {float(self.prefix_hits)}",
            "# TYPE vllm:num_preemptions counter",
            f"vllm:num_preemptions_total{{{labels}}} 0.0",
            f"# TYPE {usage} gauge",
            f"{usage}{{{labels}}} {used}",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{labels}}} {float(self.in_flight)}",
            "# TYPE vllm:cache_config_info gauge",
            f'vllm:cache_config_info{{block_size="{config["block_size"]}",cache_dtype="auto",enable_prefix_caching="True",'
            f'gpu_memory_utilization="0.9",num_cpu_blocks="None",num_gpu_blocks="{config["num_gpu_blocks"]}",'
            f'num_gpu_blocks_override="None",{labels}}} 1.0',
        ]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    @staticmethod
    async def _strike(fault: Fault, request: web.Request, resp: web.StreamResponse, rid: str) -> bool:
        """Apply a mid-stream fault; True when the stream must end here."""
        if fault.kind == "malformed":
            await resp.write(b'data: {"id": "' + rid.encode() + b'", "choices": [{"text": \n\n')
            return True
        if fault.kind == "stall":
            await asyncio.sleep(fault.stall_s)
            return False
        if fault.kind == "reset":
            if request.transport is not None:
                request.transport.abort()
            return True
        return False

    async def _die(self, request: web.Request) -> web.Response:
        """The 'die' fault: stop listening, then cut this request's connection (the response returned is never sent)."""
        if not self.dead:
            self.dead = True
            if self._runner is not None:
                for site in list(self._runner.sites):
                    await site.stop()
        if request.transport is not None:
            request.transport.abort()
        return web.Response(status=503, text="the test server was killed")

    @web.middleware
    async def _dead_middleware(self, request: web.Request, handler):
        """Once killed, every request on a connection still open is cut, whatever the endpoint."""
        if self.dead:
            return await self._die(request)
        return await handler(request)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        t_received = time.perf_counter_ns()
        t0 = asyncio.get_running_loop().time()
        index = self.completions
        self.completions += 1
        req = await self._read_completion(request, index)
        if isinstance(req, web.Response):
            return req
        if req.fault is not None and req.fault.kind == "status":
            return self._error(req.fault.status, f"injected failure on request {index}")
        if req.fault is not None and req.fault.kind == "html":
            return web.Response(status=200, text=HTML_PAGE, content_type="text/html")
        if req.fault is not None and req.fault.kind == "die":
            return await self._die(request)
        entry = self._admit(req, t_received)
        task = asyncio.current_task()
        assert task is not None  # a request handler always runs in a task
        self._handlers.add(task)
        try:
            return await (self._stream(request, req, entry, t0) if req.stream else self._whole(req, entry, t0))
        finally:
            self._handlers.discard(task)

    async def _read_completion(self, request: web.Request, index: int) -> _Completion | web.Response:
        """The request as the server understood it, or the error response vLLM would give."""
        c = self.config
        try:
            body = await request.json()
        except ValueError:
            return self._error(400, "request body is not JSON")
        chat = request.path.endswith("/chat/completions")
        text = " ".join(m.get("content", "") for m in body.get("messages", [])) if chat else body.get("prompt", "")
        if not isinstance(text, str):
            return self._error(400, "prompt must be a string")
        if body.get("model") not in (None, c.model):
            return self._error(404, f"The model `{body.get('model')}` does not exist.")
        max_tokens = int(body.get("max_tokens") or 16)
        tokens = text.split()
        if len(tokens) + max_tokens > c.max_model_len:
            return self._error(400, f"This model's maximum context length is {c.max_model_len} tokens. However, you requested "
                                    f"{len(tokens) + max_tokens} tokens ({len(tokens)} in the messages, {max_tokens} in the completion).")
        return _Completion(index=index, chat=chat, tokens=tokens, max_tokens=max_tokens, stream=bool(body.get("stream")),
                           include_usage=bool((body.get("stream_options") or {}).get("include_usage")),
                           fault=self._fault(index), ignore_eos=body.get("ignore_eos"))

    def _admit(self, req: _Completion, t_received_ns: int) -> dict:
        """Admit the prompt to the block cache; the request's log entry (what was cached, the TTFT injected)."""
        c = self.config
        cached = self.cache.admit(req.tokens)
        reported = c.reported_cached(req.index, len(req.tokens), cached)
        self.prefix_queries += len(req.tokens)
        lied = reported if isinstance(reported, int) and not isinstance(reported, bool) else cached
        self.prefix_hits += lied if c.lie_metrics else cached
        entry = {"index": req.index, "prompt_tokens": len(req.tokens), "cached_tokens": cached,
                 "reported_cached_tokens": reported,
                 "ttft_injected_s": c.ttft_s(len(req.tokens) - cached, req.index), "t_received_ns": t_received_ns,
                 "ignore_eos": req.ignore_eos}
        self.log.append(entry)
        return entry

    def _usage(self, req: _Completion, entry: dict) -> dict:
        c = self.config
        n = len(req.tokens) if c.usage_prompt_tokens is None else c.usage_prompt_tokens
        usage: dict[str, Any] = {"prompt_tokens": n, "completion_tokens": req.max_tokens, "total_tokens": n + req.max_tokens}
        cached = entry["reported_cached_tokens"]
        if c.report_cached_tokens and not (c.omit_zero_cached and cached == 0):
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        return usage

    async def _whole(self, req: _Completion, entry: dict, t0: float) -> web.Response:
        """A non-streamed completion, answered when its last token would have been."""
        c = self.config
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(0.0, t0 + entry["ttft_injected_s"] + c.itl_s * (req.max_tokens - 1) - loop.time()))
        text = " tok" * req.max_tokens
        choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"} if req.chat
                  else {"index": 0, "text": text, "finish_reason": "length"})
        return web.json_response({"id": req.rid, "object": "chat.completion" if req.chat else "text_completion",
                                  "created": int(time.time()), "model": c.model, "choices": [choice],
                                  "usage": self._usage(req, entry)})

    async def _stream(self, request: web.Request, req: _Completion, entry: dict, t0: float) -> web.StreamResponse:
        """The SSE stream: the first token at t0 + injected TTFT, then one every itl_s; usage; [DONE].

        The log entry gets the server's own stamps (perf_counter_ns, taken just before the bytes are
        written, so a client's timestamp of the same chunk is never earlier): ``t_first_sent_ns``,
        ``t_last_sent_ns``."""
        c = self.config
        loop = asyncio.get_running_loop()
        fault = req.fault
        chunks = _Chunks(req, c.model)
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            await resp.prepare(request)
            if c.burst:
                await resp.write(b"".join(self._token_chunk(chunks, entry, k) for k in range(req.max_tokens)))
            for k in range(0 if c.burst else req.max_tokens):
                delay = t0 + entry["ttft_injected_s"] + c.itl_s * k - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                if fault is not None and k == fault.at_chunk and await self._strike(fault, request, resp, req.rid):
                    return resp
                await resp.write(self._token_chunk(chunks, entry, k))
            if fault is not None and fault.at_chunk >= req.max_tokens and await self._strike(fault, request, resp, req.rid):
                return resp  # a mid-stream fault past the last token strikes before the usage chunk
            if req.include_usage:
                await resp.write(chunks.usage(self._usage(req, entry)))
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass  # the client went away, or the server is stopping
        finally:
            self.in_flight -= 1
        return resp

    def _token_chunk(self, chunks: _Chunks, entry: dict, k: int) -> bytes:
        """Token k's SSE event, stamped: the first carries x_server when ``timing`` is on."""
        last = k == chunks.max_tokens - 1
        if k == 0:
            entry["t_first_sent_ns"] = time.perf_counter_ns()
            timing = None
            if self.config.timing:
                timing = {"t_received_ns": entry["t_received_ns"], "t_first_sent_ns": entry["t_first_sent_ns"],
                          "ttft_injected_s": entry["ttft_injected_s"]}
            data = chunks.token(first=True, last=last, x_server=timing)
        else:
            data = chunks.token(first=False, last=last)
        if last:
            entry["t_last_sent_ns"] = time.perf_counter_ns()
        return data


@dataclass
class _Completion:
    """One completion request as the server read it."""

    index: int
    chat: bool
    tokens: list[str]
    max_tokens: int
    stream: bool
    include_usage: bool
    fault: Fault | None
    ignore_eos: object = None  # the request's ignore_eos as sent (this server always generates max_tokens)

    @property
    def rid(self) -> str:
        return f"cmpl-{self.index}"


class _Chunks:
    """SSE events of one stream, as vLLM shapes them (completions or chat); middle tokens encoded once."""

    def __init__(self, req: _Completion, model: str):
        self.chat = req.chat
        self.max_tokens = req.max_tokens
        self.head = {"id": req.rid, "object": "chat.completion.chunk" if req.chat else "text_completion",
                     "created": int(time.time()), "model": model}
        self._middle: bytes | None = None

    def _choice(self, first: bool, last: bool) -> dict:
        finish = "length" if last else None
        if self.chat:
            delta = {"role": "assistant", "content": " tok"} if first else {"content": " tok"}
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {"index": 0, "text": " tok", "logprobs": None, "finish_reason": finish, "stop_reason": None}

    @staticmethod
    def _event(payload: dict) -> bytes:
        return b"data: " + json.dumps(payload).encode() + b"\n\n"

    def token(self, *, first: bool, last: bool, x_server: dict | None = None) -> bytes:
        if not (first or last):
            if self._middle is None:
                self._middle = self._event({**self.head, "choices": [self._choice(False, False)]})
            return self._middle
        payload: dict[str, Any] = {**self.head, "choices": [self._choice(first, last)]}
        if x_server is not None:
            payload["x_server"] = x_server
        return self._event(payload)

    def usage(self, usage: dict) -> bytes:
        return self._event({**self.head, "choices": [], "usage": usage})


def _install_uvloop() -> bool:
    try:
        import uvloop
    except ImportError:
        return False
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True


def main(argv: list[str] | None = None) -> None:
    """Run the test server in the foreground (for benchmarks): prints its URL, serves until killed."""
    p = argparse.ArgumentParser(description="servesize test server (127.0.0.1 only)")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--capacity-tokens", type=int, default=1 << 20)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--ttft-base", type=float, default=0.2)
    p.add_argument("--ttft-per-token", type=float, default=0.0)
    p.add_argument("--itl", type=float, default=0.02)
    p.add_argument("--timing", action="store_true")
    p.add_argument("--uvloop", action="store_true", help="run on uvloop when it is installed")
    p.add_argument("--no-gc", action="store_true", help="disable the cyclic garbage collector (timing benchmarks)")
    a = p.parse_args(argv)
    if a.no_gc:
        import gc

        gc.disable()
    if a.uvloop:
        _install_uvloop()
    cfg = ServerConfig(capacity_tokens=a.capacity_tokens, block_size=a.block_size, ttft_base_s=a.ttft_base,
                       ttft_per_token_s=a.ttft_per_token, itl_s=a.itl, timing=a.timing)

    async def run() -> None:
        server = TestServer(cfg, port=a.port)
        await server.start_async()
        print(server.url, flush=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
