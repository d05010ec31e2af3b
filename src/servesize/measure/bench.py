"""``vllm bench serve --dataset-name random``, measured by servesize's own client: the same load, the same figures.

What is sent (vllm/benchmarks/datasets.py ``RandomDataset``, vllm/benchmarks/serve.py ``benchmark``): the load's
``--num-prompts`` requests, with the input and output lengths ``BenchLoad.lengths()`` draws (the lengths ``servesize bench``
simulates, so a measurement and its prediction are of one load). Each prompt is one of servesize's unique
prompts (measure/prompts.py: exactly its length where the server has /tokenize, and no block shared with any other,
as random token ids share none), asks for its output length (with ``ignore_eos`` when the load says ``--ignore-eos``,
as the benchmark sends it then), and is streamed. At most ``--max-concurrency`` are in flight, the next sent
as one ends (the benchmark's semaphore; without the flag, every request at once). The prompts are made before the
clock starts, as the benchmark builds its dataset first; with ``--ready-check-timeout-sec`` above 0 the first prompt
is sent alone and answered before it too (the benchmark's ready check), and is not counted.

What it reports is ``calculate_metrics``'s, from the timings of vllm/benchmarks/lib/endpoint_request_func.py:
- TTFT: from the send to the first event carrying a choice; latency: to the last such event; ITL: the gaps between
  successive such events, every request's pooled;
- TPOT: (latency - TTFT) / (output tokens - 1), for requests of more than one output token; output tokens:
  ``usage.completion_tokens`` (the benchmark's ``output_tokens``), else the events that carried text;
- input tokens: ``usage.prompt_tokens`` (the server's own count; the benchmark sums its dataset's lengths, which
  /tokenize makes the same), else the length asked for;
- duration: the first send to the last request's end, the throughputs over it; mean, median and p99 (numpy's).

Where it departs, on purpose: a request that failed is counted as failed and in no figure (as the benchmark does),
and a run with none completed has no latency figure (None, printed "-"; the benchmark prints 0);
a stream whose token events came in fewer reads than half their number (measure.client ``coalesced``: read late, in
bursts, on a starved client host) gives no TPOT and no ITL, since its gaps are the client's reads and not the
server's tokens, and the run says how many (the benchmark reports them as near-zero gaps), and when every stream
was, TPOT and ITL are None, never 0 ms; a stream silent for ``--stall-timeout`` (60 s) fails, where the benchmark
waits up to its own 6-hour total timeout. The prompts are servesize's words, not the benchmark's random token ids,
and ``--random-range-ratio`` draws lengths by ``BenchLoad.lengths`` (``int`` bounds, no special token taken off),
which can differ from vLLM's floor and ceil by a token.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.measure.client import RequestResult, StreamClient
from servesize.measure.prompts import PromptFactory
from servesize.simulate.bench import BenchLoad, metrics_document, result_block, stats_ms, tpot_ms

# The request's fields as vLLM 0.32's bench sends them (benchmarks/lib/endpoint_request_func.py): no temperature
# (the server's default sampling; servesize's client sends 0.0 elsewhere) and ignore_eos only with --ignore-eos
BENCH_FIELDS: dict[bool, dict[str, Any]] = {False: {"temperature": None, "ignore_eos": None},
                                             True: {"temperature": None, "ignore_eos": True}}
MAX_BENCH_PROMPTS = 10_000  # requests of one measured run: each prompt is made (up to 13 /tokenize calls) first


@dataclass
class BenchConfig:
    """A measured benchmark: the server, and the load in ``vllm bench serve``'s flags (``load``)."""

    url: str
    load: BenchLoad
    model: str | None = None
    api: str = "completions"
    timeout_s: float = 600.0
    stall_timeout_s: float = 60.0

    def __post_init__(self):
        load = self.load
        if load.num_prompts > MAX_BENCH_PROMPTS:
            raise BadInput(f"--num-prompts {load.num_prompts:,} is past the {MAX_BENCH_PROMPTS:,} one measured run "
                           "sends (each prompt is made against the server first)", field="num_prompts")
        if load.random_prefix_len:
            raise BadInput("--random-prefix-len: measure bench sends prompts that share no block (servesize's unique "
                           "prompts); a shared prefix is not measured here", field="random_prefix_len")
        if math.isfinite(load.request_rate):
            raise BadInput("--request-rate: measure bench runs the fixed-concurrency mode (--max-concurrency C, the "
                           "next request sent as one ends); a Poisson stream is not measured here", field="request_rate")
        if self.api not in ("completions", "chat"):
            raise BadInput(f"--api must be completions or chat, not {self.api!r}", field="api")

    @property
    def concurrency(self) -> int:
        return self.load.max_concurrency or self.load.num_prompts

    def to_params(self) -> dict:
        return {"url": self.url, "model": self.model, "api": self.api, "timeout_s": self.timeout_s,
                "stall_timeout_s": self.stall_timeout_s, "load": self.load.to_dict()}


@frozen
class BenchMeasured:
    """The benchmark's result block, measured: the metric keys ``vllm bench serve --save-result`` writes (not its
    ``std_*`` and peak figures; ``errors`` is a count per kind where the benchmark lists each request's)."""

    config: BenchConfig
    model: str
    metrics: dict
    coalesced: int
    errors: dict[str, int]
    prompts: str  # how the prompts were made: 'tokenize' (exact), 'probe' (calibrated) or 'words'
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 0 if self.metrics["completed"] else 2

    @property
    def failure(self) -> str | None:
        """No figure from requests that failed: with none completed there is no result."""
        if self.metrics["completed"]:
            return None
        first = next(iter(self.errors), "no answer")
        return (f"no request of {self.config.load.num_prompts:,} completed against {self.config.url} ({first}: "
                f"{self.errors.get(first, 0):,}); the record keeps each error")

    def to_dict(self) -> dict[str, Any]:
        load = self.config.load.to_dict()
        return {**self.metrics, **{k: load[k] for k in ("num_prompts", "max_concurrency", "request_rate")},
                "measured": True, "url": self.config.url, "model_id": self.model, "load": load,
                "coalesced_streams": self.coalesced, "errors": self.errors, "prompts": self.prompts,
                "notes": self.notes, "failure": self.failure}

    def render(self, explain: bool = False) -> str:
        lines = result_block(self.metrics, self.config.load.max_concurrency)
        exact = {"tokenize": "exact, by /tokenize", "probe": "calibrated from usage.prompt_tokens",
                 "words": "one token a word"}.get(self.prompts, self.prompts)
        lines.append(f"measured by servesize against {self.config.url} ({self.model}); prompt lengths {exact}")
        if self.errors:
            lines.append("failed: " + ", ".join(f"{kind} {n:,}" for kind, n in self.errors.items()))
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def bench_figures(results: list[RequestResult], asked_input: np.ndarray, duration_s: float) -> tuple[dict, int]:
    """``calculate_metrics`` over measured requests (the module docstring's definitions), and how many completed
    streams were coalesced (no TPOT or ITL taken from them)."""
    done = [r for r in results if r.ok and r.chunk_times_s]
    times = [r.chunk_times_s or [] for r in done]
    outs = [r.completion_tokens or r.token_events for r in done]
    timed = [k for k, r in enumerate(done) if not r.coalesced]  # their gaps are the server's
    ttft = np.asarray([t[0] * 1e3 for t in times])
    latency = np.asarray([times[k][-1] * 1e3 for k in timed])
    itl = [(b - a) * 1e3 for k in timed for a, b in itertools.pairwise(times[k])]
    tpot = tpot_ms(ttft[timed], latency, np.asarray([outs[k] for k in timed], dtype=float))
    metrics = metrics_document(len(done), len(results) - len(done), duration_s, _input_tokens(results, asked_input),
                               sum(outs), ttft, tpot, stats_ms("itl", np.asarray(itl)))
    # no figure, never 0 ms, where nothing was measured: no request completed (no latency at all), or every
    # completed stream was coalesced (no TPOT or ITL). A run whose outputs are all one token keeps vLLM's TPOT of 0
    unmeasured = ("ttft", "tpot", "itl") if not done else ("tpot", "itl") if not timed else ()
    for name in unmeasured:
        metrics.update({f"{stat}_{name}_ms": None for stat in ("mean", "median", "p99")})
    return metrics, len(done) - len(timed)


def _input_tokens(results: list[RequestResult], asked_input: np.ndarray) -> int:
    """The completed requests' prompt tokens: usage.prompt_tokens, else the length asked for (by index)."""
    total = 0
    for r, asked in zip(results, asked_input.tolist()):
        if r.ok and r.chunk_times_s:
            total += int(asked) if r.prompt_tokens is None else r.prompt_tokens
    return total


def error_kinds(results: list[RequestResult]) -> dict[str, int]:
    """Each failed request's kind, most frequent first: its error's type, or ``no_choice`` for a stream that ended
    without a choice (no token: the benchmark counts it failed too), so the kinds add up to "Failed requests"."""
    kinds = (r.error["type"] if r.error is not None else "no_choice" for r in results
             if r.error is not None or not r.chunk_times_s)
    return dict(Counter(kinds).most_common())


async def measure_bench(cfg: BenchConfig, *, record, progress) -> BenchMeasured:
    """Make the prompts, send them at the load's concurrency, append every result to ``record`` as it ends."""
    load = cfg.load
    inputs, outputs = load.lengths()
    async with StreamClient(cfg.url, cfg.model, timeout_s=cfg.timeout_s, stall_timeout_s=cfg.stall_timeout_s,
                            api=cfg.api) as client:
        entries = await client.models()  # one listing: the model's name and its max_model_len
        model = await client.resolve_model(entries)
        limit = next((e.get("max_model_len") for e in entries if e.get("id") == model), None)
        if isinstance(limit, int) and not isinstance(limit, bool) and load.longest_request_tokens > limit:
            raise BadInput(f"the load's longest request ({load.longest_request_tokens:,} tokens, prompt and output) "
                           f"is past the server's max_model_len {limit:,} (/v1/models): every such request would "
                           "be refused; lower --random-input-len or --random-output-len")
        factory = PromptFactory(client, seed=load.random_seed)
        await factory.start()
        prompts = []
        for i in range(load.num_prompts):
            prompts.append(await factory.make(i, int(inputs[i])))
            progress(f"measure bench: prompts {i + 1:,}/{load.num_prompts:,}")
        record.append("info", model=model, prompts=factory.mode, note=factory.note,
                      input_tokens=[p.tokens for p in prompts])
        slots = asyncio.Semaphore(cfg.concurrency)
        results: list[RequestResult | None] = [None] * load.num_prompts
        ended = 0

        async def one(i: int) -> None:
            nonlocal ended
            async with slots:
                r = await client.complete(prompts[i].text, max_tokens=int(outputs[i]), request_id=f"bench-{i}",
                                          keep_chunks=True, extra_body=BENCH_FIELDS[load.ignore_eos])
            results[i] = r
            record.append("request", index=i, result=r.to_dict())
            ended += 1
            progress(f"measure bench: {ended:,}/{load.num_prompts:,} requests ({cfg.concurrency:,} at a time)")

        if load.ready_check:  # vllm bench serve's ready check: the first prompt alone, answered, not counted
            progress("measure bench: the ready check's test request (the first prompt, alone)")
            test = await client.complete(prompts[0].text, max_tokens=int(outputs[0]), request_id="bench-ready-check",
                                         keep_chunks=False, extra_body=BENCH_FIELDS[load.ignore_eos])
            record.append("info", ready_check=test.to_dict())
            if test.error:
                raise BadInput(f"the ready check's test request failed ({test.error.get('message', test.error)}): "
                               "the server is not answering the benchmark's first prompt")
        start = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(load.num_prompts)))
        duration = time.perf_counter() - start
    answered = [r if r is not None else RequestResult(id=f"bench-{i}", error={"type": "client_error",
                                                                             "message": "no result"})
                for i, r in enumerate(results)]  # each index its own prompt's length in bench_figures
    metrics, coalesced = bench_figures(answered, inputs, duration)
    errors = error_kinds(answered)
    notes = [factory.note] if factory.note else []
    if coalesced:
        notes.append(f"{coalesced:,} of {metrics['completed']:,} completed streams arrived in fewer reads than half "
                     "their tokens (a starved client host): their TPOT and ITL are not taken (their gaps are the "
                     "client's reads, not the server's tokens)")
    return BenchMeasured(cfg, model, metrics, coalesced, errors, factory.mode or "words", notes)

