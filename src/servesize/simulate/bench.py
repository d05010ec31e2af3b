"""What ``vllm bench serve`` would print for a deployment and a load, through the engine simulator.

The load is vLLM's random dataset, in its own flags (vllm/benchmarks/datasets.py ``RandomDataset``,
vllm/benchmarks/serve.py): ``--num-prompts`` prompts of ``--random-input-len`` tokens (uniform within
``--random-range-ratio`` of it, after a ``--random-prefix-len`` prefix every prompt shares) asking for
``--random-output-len`` tokens each (uniform in the same ratio). Every request is simulated to generate all of
them, which is what the benchmark's ``--ignore-eos`` asks for; without it (the benchmark's default) a model may
stop at EOS sooner, which no simulation of the engine can know, and the result says so. Random tokens share no
block, so nothing but the common prefix hits the prefix cache.

Before them, where ``--ready-check-timeout-sec`` is above 0, the benchmark sends the first request alone and waits
for its answer (vllm/benchmarks/serve.py ``wait_for_endpoint``: its prompt and output length, the "initial single
prompt test run"); the run starts when it is answered, its prompt's blocks cached, so the first request of the run
hits them. vLLM skips it by default since PR #30975 (2025-12-18); the older benchmark_serving.py always sent it.

When requests are sent:
  ``--request-rate inf`` (the default) with ``--max-concurrency C``: C requests in flight, the next sent as one
      finishes (the benchmark's semaphore: C closed-loop clients with no pause);
  ``--request-rate inf`` alone: every request at once;
  ``--request-rate R`` without ``--max-concurrency``: a Poisson stream at R per second (burstiness 1).
  Both a rate and a concurrency cap: not modelled (the send time is then the later of the draw and a free slot).

What it reports is what the benchmark computes (vllm/benchmarks/serve.py ``calculate_metrics``): per request
TTFT (sent to first token), TPOT ((latency - TTFT) / (output - 1), requests with more than one output token),
the inter-token latencies (every step that decodes a request is one ITL of that request: the step's duration),
their mean, median and p99, and the throughputs over the benchmark's duration (first send to last finish).
"""

from __future__ import annotations

import math
from dataclasses import field

import numpy as np

from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.percentile import percentiles, weighted_percentile
from servesize.simulate.engine import EngineRun
from servesize.simulate.replay import Replay

MAX_PROMPTS = 100_000
MAX_PROMPT_TOKENS = 10_000_000
PERCENTILES = (50.0, 99.0)  # the benchmark's default --metric-percentiles is 99; the median is printed too


@frozen
class BenchLoad:
    """The load of one ``vllm bench serve --dataset-name random`` run, in its flags' names."""

    random_input_len: int = 1024
    random_output_len: int = 128
    random_range_ratio: float = 0.0
    random_prefix_len: int = 0
    num_prompts: int = 1000
    max_concurrency: int | None = None
    request_rate: float = math.inf
    random_seed: int = 0  # vllm bench serve's --seed (Scenario's seed is the Monte-Carlo's)
    ignore_eos: bool = False  # --ignore-eos: every request generates all its output tokens (the benchmark's default: no)
    # --ready-check-timeout-sec > 0: the first request's prompt is sent alone and answered before the run (its prompt
    # then sits in the prefix cache); vLLM's default since PR #30975 (2025-12-18) skips it, benchmark_serving.py
    # and vllm bench serve before it always sent it
    ready_check: bool = False

    def __post_init__(self):
        for name, lo, hi in (("random_input_len", 1, MAX_PROMPT_TOKENS), ("random_output_len", 1, MAX_PROMPT_TOKENS),
                             ("random_prefix_len", 0, MAX_PROMPT_TOKENS), ("num_prompts", 1, MAX_PROMPTS)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise BadInput(f"--{name.replace('_', '-')} must be a whole number in [{lo:,}, {hi:,}], got {value!r}",
                               field=name)
        if not (math.isfinite(self.random_range_ratio) and 0 <= self.random_range_ratio < 1):
            raise BadInput(f"--random-range-ratio must be in [0, 1), got {self.random_range_ratio!r}",
                           field="random_range_ratio")
        if self.max_concurrency is not None and not 1 <= self.max_concurrency <= MAX_PROMPTS:
            raise BadInput(f"--max-concurrency must be in [1, {MAX_PROMPTS:,}], got {self.max_concurrency!r}",
                           field="max_concurrency")
        if math.isnan(self.request_rate) or self.request_rate <= 0:
            raise BadInput(f"--request-rate must be > 0 requests/s (inf: all at once), got {self.request_rate!r}",
                           field="request_rate")
        if math.isfinite(self.request_rate) and self.max_concurrency is not None:
            raise BadInput("--request-rate with --max-concurrency is not modelled (a request is then sent at the later "
                           "of its Poisson draw and a free slot): give one of the two", field="request_rate")
        if self.random_prefix_len + self._interval(self.random_input_len)[0] < 1:
            raise BadInput(f"--random-input-len {self.random_input_len} at --random-range-ratio "
                           f"{self.random_range_ratio:g} can draw an empty prompt, which vllm bench serve refuses: "
                           "raise --random-input-len or --random-prefix-len, or lower the ratio",
                           field="random_input_len")
        if not 0 <= self.random_seed < 2**63:
            raise BadInput(f"--seed must be in [0, 2**63), got {self.random_seed!r}", field="random_seed")

    def _interval(self, mean: int) -> tuple[int, int]:
        """vLLM's interval before its floor of 1: floor of mean x (1 - r), ceil of mean x (1 + r)."""
        r = self.random_range_ratio
        return math.floor(mean * (1 - r)), math.ceil(mean * (1 + r))

    def bounds(self, mean: int) -> tuple[int, int]:
        """The interval a length is drawn from, as vLLM's random dataset computes it (vllm/benchmarks/datasets/
        utils.py ``get_sampling_params``: floor of mean x (1 - r), ceil of mean x (1 + r); an output at least 1, and
        a prompt never empty: __post_init__ refuses what vLLM refuses), the same float expressions, so the same
        bounds. vLLM first takes the tokenizer's special tokens (a BOS) off the input length and the server adds them
        back; servesize knows no tokenizer, so an input draw here is that of a
        tokenizer that adds none (Qwen's): with a BOS, vLLM draws from the interval of input - 1, plus 1."""
        lo, hi = self._interval(mean)
        return max(1, lo), max(1, hi)

    @property
    def longest_request_tokens(self) -> int:
        return self.random_prefix_len + self.bounds(self.random_input_len)[1] + self.bounds(self.random_output_len)[1]

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """Per prompt, its input tokens (prefix included) and its output tokens, as the random dataset draws them:
        one generator seeded with ``--seed``, every input length drawn, then every output length (vLLM's order)."""
        rng = np.random.default_rng(self.random_seed)

        def draw(mean: int) -> np.ndarray:
            lo, hi = self.bounds(mean)
            return rng.integers(lo, hi + 1, size=self.num_prompts)

        inputs = draw(self.random_input_len) + self.random_prefix_len
        return inputs.astype(np.int64), draw(self.random_output_len).astype(np.int64)

    def to_dict(self) -> dict:
        return {"dataset_name": "random", "random_input_len": self.random_input_len,
                "random_output_len": self.random_output_len, "random_range_ratio": self.random_range_ratio,
                "random_prefix_len": self.random_prefix_len, "num_prompts": self.num_prompts,
                "max_concurrency": self.max_concurrency,
                "request_rate": "inf" if math.isinf(self.request_rate) else self.request_rate, "seed": self.random_seed,
                "ignore_eos": self.ignore_eos, "ready_check": self.ready_check}


def bench_replay(load: BenchLoad, block_size: int, start_s: float | None = None) -> Replay:
    """The benchmark's requests as a replay: each prompt its own blocks (the shared prefix's first), sent as the
    load says; a closed-loop client per concurrency slot (``Replay.user``) or one per request.

    ``start_s`` None: the run alone. Else the ready check's test request comes first (index 0: the first request's
    prompt and output, sent at 0 by a client of its own) and the run's requests are sent from ``start_s`` on (when
    the test is answered: ``ready_check_replay`` times it alone)."""
    if block_size < 1:
        raise BadInput(f"the block size must be >= 1 token, got {block_size}")
    inputs, outputs = load.lengths()
    test = start_s is not None
    if test:  # the test request repeats the first request's prompt and output
        inputs, outputs = np.concatenate([inputs[:1], inputs]), np.concatenate([outputs[:1], outputs])
    n = inputs.size
    prefix_blocks = load.random_prefix_len // block_size
    full = inputs // block_size
    own = np.maximum(full - prefix_blocks, 0)
    offsets = np.zeros(n + 1, dtype=np.int64)
    offsets[1:] = np.cumsum(np.minimum(full, prefix_blocks) + own)
    nodes = np.empty(int(offsets[-1]), dtype=np.int64)
    next_id = prefix_blocks
    for i in range(n):
        shared = int(min(full[i], prefix_blocks))
        nodes[offsets[i]:offsets[i] + shared] = np.arange(shared)
        mine = int(own[i])
        if test and i == 1:  # the run's first request: the test's own prompt
            nodes[offsets[1] + shared:offsets[2]] = nodes[offsets[0] + shared:offsets[1]]
            continue
        nodes[offsets[i] + shared:offsets[i + 1]] = np.arange(next_id, next_id + mine)
        next_id += mine
    runs = load.num_prompts
    if math.isfinite(load.request_rate):
        rng = np.random.default_rng([load.random_seed, 1])
        arrival = np.cumsum(rng.exponential(1.0 / load.request_rate, size=runs)) - 0.0
        arrival[0] = 0.0
        arrival = np.maximum.accumulate(arrival)
        user = np.arange(runs)
    else:
        slots = runs if load.max_concurrency is None else min(load.max_concurrency, runs)
        arrival = np.zeros(runs)
        user = np.arange(runs) % slots
    if start_s is not None:  # the test's client is one of its own, before every other
        arrival = np.concatenate([[0.0], arrival + float(start_s)])
        user = np.concatenate([[int(user.max()) + 1], user])
    return Replay(block_size=block_size, arrival_s=arrival.astype(np.float64), service_s=np.full(n, np.nan),
                  input_tokens=inputs, output_tokens=outputs, session=np.arange(n), user=user.astype(np.int64),
                  source=np.arange(n), subagent=np.zeros(n, dtype=bool), nodes=nodes, offsets=offsets,
                  num_nodes=max(int(next_id), 1), measured_from=0,
                  sessions=n, choices={"load": load.to_dict()})


def ready_check_replay(load: BenchLoad, block_size: int) -> Replay:
    """The ready check's test request alone (the first request's prompt and output), to time when the run starts."""
    r = bench_replay(load, block_size, start_s=0.0)
    end = int(r.offsets[1])
    return Replay(block_size=block_size, arrival_s=r.arrival_s[:1], service_s=r.service_s[:1],
                  input_tokens=r.input_tokens[:1], output_tokens=r.output_tokens[:1], session=r.session[:1],
                  user=r.user[:1], source=r.source[:1], subagent=r.subagent[:1], nodes=r.nodes[:end],
                  offsets=r.offsets[:2], num_nodes=r.num_nodes, measured_from=0, sessions=1, choices=r.choices)


@frozen
class BenchResult:
    """The benchmark's result block, predicted: the keys ``vllm bench serve --save-result`` writes."""

    load: BenchLoad
    metrics: dict
    deployment: dict
    step_model: dict
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        load = self.load.to_dict()  # --save-result writes these beside the metrics too
        return {**self.metrics, **{k: load[k] for k in ("num_prompts", "max_concurrency", "request_rate")},
                "load": load, "deployment": self.deployment,
                "step_model": self.step_model, "notes": self.notes}

    def render(self, explain: bool = False) -> str:
        lines = result_block(self.metrics, self.load.max_concurrency)
        lines.append("predicted by servesize's engine simulator, not measured")
        d = self.deployment
        lines.append(f"{d['model']} on {d['gpus']} (TP {d['tensor_parallel_size']}), "
                     f"--max-num-seqs {d['max_num_seqs']}, --max-num-batched-tokens {d['max_num_batched_tokens']}, "
                     f"{d['num_gpu_blocks']:,} blocks of {d['block_size']}")
        lines.append(f"step model: {self.step_model['summary']}")
        if explain:
            lines += [f"  {k}: {v}" for k, v in self.step_model.items() if k != "summary"]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def result_block(m: dict, max_concurrency: int | None) -> list[str]:
    """The lines ``vllm bench serve`` prints for its metrics ``m`` (vllm/benchmarks/serve.py, the result block),
    predicted (BenchResult) or measured (servesize.measure.bench) alike."""
    rows = [
        ("Successful requests:", f"{m['completed']}"),
        ("Failed requests:", f"{m['failed']}"),
        ("Maximum request concurrency:", f"{max_concurrency}") if max_concurrency else None,
        ("Benchmark duration (s):", f"{m['duration']:.2f}"),
        ("Total input tokens:", f"{m['total_input_tokens']}"),
        ("Total generated tokens:", f"{m['total_output_tokens']}"),
        ("Request throughput (req/s):", f"{m['request_throughput']:.2f}"),
        ("Output token throughput (tok/s):", f"{m['output_throughput']:.2f}"),
        ("Total token throughput (tok/s):", f"{m['total_token_throughput']:.2f}"),
    ]
    lines = [f"{' Serving Benchmark Result ':=^50}"]
    lines += [f"{label:<40}{value:<10}" for row in rows if row for label, value in [row]]
    for title, key, name in (("Time to First Token", "ttft", "TTFT"), ("Time per Output Token (excl. 1st token)",
                                                                      "tpot", "TPOT"),
                             ("Inter-token Latency", "itl", "ITL")):
        lines.append(f"{title:-^50}")
        for label, stat in (("Mean", "mean"), ("Median", "median"), ("P99", "p99")):
            value = m[f"{stat}_{key}_ms"]
            lines.append(f"{f'{label} {name} (ms):':<40}{'-' if value is None else f'{value:.2f}':<10}")
    lines.append("=" * 50)
    return lines


def stats_ms(name: str, x: np.ndarray) -> dict:
    """Mean, median and p99 of ``x`` (ms) under the benchmark's keys; 0 for none (its ``np.mean(x or 0)``)."""
    if x.size == 0:
        return {f"mean_{name}_ms": 0.0, f"median_{name}_ms": 0.0, f"p99_{name}_ms": 0.0}
    p50, p99 = percentiles(x, (50, 99))
    return {f"mean_{name}_ms": float(x.mean()), f"median_{name}_ms": p50, f"p99_{name}_ms": p99}


def tpot_ms(ttft_ms: np.ndarray, latency_ms: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The benchmark's TPOT: (latency - TTFT) / (output - 1), for the requests of more than one output token."""
    many = out > 1
    return (latency_ms[many] - ttft_ms[many]) / (out[many] - 1)


def metrics_document(completed: int, failed: int, duration: float, total_in: int, total_out: int, ttft: np.ndarray,
                     tpot: np.ndarray, itl: dict) -> dict:
    """``calculate_metrics``'s document from its parts: the counts, the throughputs over ``duration``, and the mean,
    median and p99 of TTFT and TPOT (ms); ``itl`` its ITL statistics (pooled, or step-weighted when simulated)."""
    def per_s(x: float) -> float:
        return x / duration if duration > 0 else 0.0

    return {"completed": completed, "failed": failed, "duration": duration,
            "total_input_tokens": total_in, "total_output_tokens": total_out,
            "request_throughput": per_s(completed), "output_throughput": per_s(total_out),
            "total_token_throughput": per_s(total_in + total_out),
            **stats_ms("ttft", ttft), **stats_ms("tpot", tpot), **itl}


def bench_metrics(run: EngineRun, replicas: int = 1, skip: int = 0, skip_steps: int = 0) -> dict:
    """``calculate_metrics`` over the simulated run: every request that was answered (``replicas`` identical
    replicas side by side: counts and throughputs scale, latencies do not), less the first ``skip`` requests and
    ``skip_steps`` steps (the ready check's test request and its steps, which the benchmark does not count)."""
    arrival, first_s, finish_s = run.arrival_s[skip:], run.first_token_s[skip:], run.finish_s[skip:]
    done = np.isfinite(finish_s) & np.isfinite(first_s)
    sent, first, finish = arrival[done], first_s[done], finish_s[done]
    out = run.output_tokens[skip:][done].astype(float)
    ttft = (first - sent) * 1e3
    latency = (finish - sent) * 1e3
    tpot = tpot_ms(ttft, latency, out)
    steps = np.asarray(run.step_seconds, dtype=float)[skip_steps:] * 1e3
    decoders = np.asarray(run.decoders_per_step, dtype=np.int64)[skip_steps:]
    itl_w = decoders[decoders > 0]
    itl_v = steps[decoders > 0]
    start = float(np.nanmin(arrival)) if np.isfinite(arrival).any() else 0.0
    duration = float(finish.max() - start) if finish.size else 0.0
    completed = int(done.sum()) * replicas
    total_in = int(run.input_tokens[skip:][done].sum()) * replicas
    total_out = int(out.sum()) * replicas

    itl = {"mean_itl_ms": float((itl_v * itl_w).sum() / itl_w.sum()) if itl_w.size else 0.0,
           "median_itl_ms": weighted_percentile(itl_v, itl_w, 50.0) if itl_w.size else 0.0,
           "p99_itl_ms": weighted_percentile(itl_v, itl_w, 99.0) if itl_w.size else 0.0}
    return metrics_document(completed, int((~done).sum()) * replicas, duration, total_in, total_out, ttft, tpot, itl)
