"""servesize measure pool: a live server's real KV pool, by bisection on LRU's cliff."""

from __future__ import annotations

import argparse

from servesize.units import parse_tokens

HELP = "measure a live server's real KV pool (unique-id prompts, bisection)"
EPILOG = """\
examples:
  servesize measure pool --url http://localhost:8000 --prompt-tokens 4097 --predicted-tokens 1.3m
  servesize measure pool --url http://localhost:8000 --record pool.jsonl --plot pool.png
  servesize measure pool --url http://localhost:8000 --predict "qwen3.6-27b --gpus 1xH200 --kv-cache-dtype fp8"
  servesize measure pool --resume pool.jsonl          continue an interrupted run

n prompts of S tokens, each starting with a unique id, go out in parallel for R rounds: round 1
fills the cache, later rounds test warmth. LRU's cyclic worst case makes warmth collapse one prompt
past the pool, so n is bisected from the prediction; with a known block size one extra prompt is
bisected to the block. Warm/cold comes from usage.prompt_tokens_details.cached_tokens (vLLM:
--enable-prompt-tokens-details), else vLLM's prefix-cache counters in /metrics, else TTFT.
Every result is appended to the run record as it arrives; --resume continues it.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", help="the server, e.g. http://localhost:8000")
    p.add_argument("--model", help="model name (default: the server's first /v1/models entry)")
    p.add_argument("--prompt-tokens", type=parse_tokens, default=4097, metavar="S",
                   help="tokens per prompt (default 4097; rounded to m x block + 1 when the block size is known)")
    p.add_argument("--rounds", type=int, default=3, metavar="R", help="rounds per probe (default 3: 1 fills, 2 test)")
    p.add_argument("--predicted-tokens", type=parse_tokens, metavar="N", help="predicted pool in tokens: where the search starts")
    p.add_argument("--predict", metavar='"MODEL --gpus ... [vLLM flags]"',
                   help="servesize's own prediction for the served model and its flags (the arguments of "
                        "`servesize memory`), e.g. \"qwen3.6-27b --gpus 1xH200 --kv-cache-dtype fp8\"")
    p.add_argument("--max-parallel", type=int, default=256, metavar="N", help="largest n probed (default 256)")
    p.add_argument("--block-size", type=int, help="the engine's block size, when /metrics does not publish it")
    p.add_argument("--signals", default="cached_tokens,metrics,ttft",
                   help="warmth signals in order of trust (default cached_tokens,metrics,ttft)")
    p.add_argument("--warm-share", type=float, default=1.0, help="share of later-round requests that must be warm (default 1.0)")
    p.add_argument("--no-fine", action="store_true", help="stop at prompt resolution (skip the block-level stage)")
    p.add_argument("--fine-order", default="sequential", choices=["sequential", "parallel"],
                   help="block-level stage: one request at a time in a fixed order (default; exact to the block) "
                        "or all at once like the coarse stage")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S", help="per-request total timeout in seconds (default 600)")
    p.add_argument("--stall-timeout", type=float, default=60.0, metavar="S",
                   help="longest silence between chunks once streaming (default 60)")
    p.add_argument("--seed", type=int, default=0, help="filler seed (ids are random per run)")
    p.add_argument("--record", metavar="FILE", help="the JSONL run record (default: servesize-pool-<time>.jsonl here)")
    p.add_argument("--resume", metavar="FILE", help="continue the run recorded in FILE (its parameters are reused)")
    p.add_argument("--fsync", action="store_true", help="fsync the record after every line")
    p.add_argument("--plot", metavar="FILE.png", help="write warm share vs n and TTFT of hits/misses")
    p.add_argument("--quiet", action="store_true", help="no progress line on stderr")


def predicted_pool(text: str | None):
    """servesize's own prediction for ``--predict "MODEL --gpus ... [vLLM flags]"``: the KvPool."""
    if not text:
        return None
    from servesize.api import memory
    from servesize.flags import scenario_from_flags

    return memory(scenario_from_flags(text)).pool


def pool_config(args, predicted_tokens: int | None):
    from servesize.measure.pool import PoolConfig

    return PoolConfig(url=args.url, model=args.model, prompt_tokens=args.prompt_tokens, rounds=args.rounds,
                      predicted_tokens=predicted_tokens, max_parallel=args.max_parallel, timeout_s=args.timeout,
                      stall_timeout_s=args.stall_timeout, block_size=args.block_size, warm_share=args.warm_share,
                      signals=tuple(s.strip() for s in args.signals.split(",") if s.strip()), fine=not args.no_fine,
                      fine_order=args.fine_order, seed=args.seed)


def measure(args, rec, predicted=None):
    """Run (or continue) the pool measurement described by ``args`` into the record ``rec``."""
    from servesize.commands._measure import open_record, run_recorded
    from servesize.measure.pool import PoolConfig, measure_pool, predicted_tokens_of

    tokens = args.predicted_tokens if args.predicted_tokens is not None else predicted_tokens_of(predicted)
    cfg, record, contents = open_record(rec, "pool", PoolConfig, lambda: pool_config(args, tokens))
    return run_recorded(rec, record, lambda progress: measure_pool(cfg, record=record, resume=contents,
                                                                    predicted=predicted, progress=progress))


def run(args):
    from servesize.commands._measure import Recording

    result = measure(args, Recording.of(args), predicted_pool(args.predict))
    if args.plot:
        from servesize.measure.plots import plot_pool

        plot_pool(result, args.plot)
    return result
