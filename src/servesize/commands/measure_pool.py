"""servesize measure pool: a live server's real KV pool, by bisection on LRU's cliff."""

from __future__ import annotations

import argparse

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
    from servesize.commands._measure import add_common, add_flag

    p.add_argument("--url", help="the server, e.g. http://localhost:8000")
    p.add_argument("--model", help="model name (default: the server's first /v1/models entry)")
    add_flag(p, "prompt_tokens", 4097, help="tokens per prompt (rounded to m x block + 1 when the block size is known)")
    add_flag(p, "rounds", 3, help="rounds per probe (1 fills, the later ones test)")
    add_flag(p, "predicted_tokens")
    p.add_argument("--predict", metavar='"MODEL --gpus ... [vLLM flags]"',
                   help="servesize's own prediction for the served model and its flags (the arguments of "
                        "`servesize memory`), e.g. \"qwen3.6-27b --gpus 1xH200 --kv-cache-dtype fp8\"")
    add_flag(p, "max_parallel", 256)
    add_flag(p, "block_size")
    p.add_argument("--signals", default="cached_tokens,metrics,ttft",
                   help="warmth signals in order of trust (default cached_tokens,metrics,ttft)")
    add_flag(p, "warm_share", 1.0)
    p.add_argument("--no-fine", action="store_true", help="stop at prompt resolution (skip the block-level stage)")
    p.add_argument("--fine-order", default="sequential", choices=["sequential", "parallel"],
                   help="block-level stage: one request at a time in a fixed order (default; exact to the block) "
                        "or all at once like the coarse stage")
    add_common(p, "pool", "continue the run recorded in FILE (its parameters are reused)")
    p.add_argument("--plot", metavar="FILE.png", help="write warm share vs n and TTFT of hits/misses")
    p.add_argument("--quiet", action="store_true", help="no progress line on stderr")


def predicted_pool(text: str | None):
    """servesize's own prediction for ``--predict "MODEL --gpus ... [vLLM flags]"``: the KvPool."""
    if not text:
        return None
    from servesize.api import memory
    from servesize.flags import scenario_from_flags

    return memory(scenario_from_flags(text)).pool


def predicted_source(args) -> str | None:
    """What the prediction is, in words, for the report and the record."""
    if args.predicted_tokens is not None:
        return "given as --predicted-tokens"
    if args.predict:
        return f"the usable KV tokens of `servesize memory {args.predict}`"
    return None


def pool_config(args, predicted_tokens: int | None):
    from servesize.measure.pool import PoolConfig

    return PoolConfig(url=args.url, model=args.model, prompt_tokens=args.prompt_tokens, rounds=args.rounds,
                      predicted_tokens=predicted_tokens, max_parallel=args.max_parallel, timeout_s=args.timeout,
                      stall_timeout_s=args.stall_timeout, block_size=args.block_size, warm_share=args.warm_share,
                      signals=tuple(s.strip() for s in args.signals.split(",") if s.strip()), fine=not args.no_fine,
                      fine_order=args.fine_order, seed=args.seed,
                      predicted_source=predicted_source(args) if predicted_tokens is not None else None)


def measure(args, rec, predicted=None):
    """Run (or continue) the pool measurement described by ``args`` into the record ``rec``."""
    from servesize.commands._measure import open_record, run_recorded
    from servesize.measure.pool import PoolConfig, measure_pool, predicted_tokens_of

    tokens = args.predicted_tokens if args.predicted_tokens is not None else predicted_tokens_of(predicted)
    if args.predicted_tokens is None and tokens is not None and predicted is not None:
        predicted = None  # its token count is in the config (and so in the record) from here on
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
