"""servesize measure bench: `vllm bench serve --dataset-name random` against a live server, by servesize's client."""

from __future__ import annotations

import argparse

from servesize.errors import BadInput

EPILOG = """\
examples:
  servesize measure bench --url http://localhost:8000 --random-input-len 1024 --random-output-len 128 \\
      --num-prompts 200 --max-concurrency 16
  servesize measure bench --url http://localhost:8000 --num-prompts 64 --max-concurrency 8 --json > measured.json
  servesize calibrate --vllm-bench measured.json --model ...   (the measured result calibrates the step model)

The fixed-concurrency mode of `vllm bench serve`: the same load (its random dataset's lengths, from the same
flags and --seed as `servesize bench`, which predicts it), C requests in flight and the next sent as one ends,
streamed, EOS ignored with --ignore-eos as the benchmark does; and the same figures by the benchmark's own
definitions (TTFT to the first streamed choice, TPOT = (latency - TTFT) / (output - 1), ITL between streamed
choices, throughputs over the run). Prompts share no cached block and are exactly their length where the server
has /tokenize. Every request's result is appended to the run record as it ends; a benchmark's duration is one
uninterrupted run's, so an interrupted one is run again, not resumed. --json prints the metric keys `vllm bench
serve --save-result` writes.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    from servesize.commands._measure import add_flag
    from servesize.commands.bench import add_load_arguments

    p.add_argument("--url", help="the server, e.g. http://localhost:8000")
    p.add_argument("--model", help="model name (default: the server's first /v1/models entry)")
    p.add_argument("--api", choices=["completions", "chat"], default="completions",
                   help="the endpoint: /v1/completions (the benchmark's default backend) or /v1/chat/completions")
    add_load_arguments(p)
    add_flag(p, "timeout", 600.0)
    add_flag(p, "stall_timeout", 60.0)
    p.add_argument("--record", metavar="FILE", help="the JSONL run record (default: servesize-bench-<time>.jsonl here)")
    p.add_argument("--fsync", action="store_true", help="fsync the record after every line")
    p.add_argument("--quiet", action="store_true", help="no progress line on stderr")


def run(args):
    import time

    from servesize.commands._measure import Recording, check_url, run_recorded
    from servesize.commands.bench import load_of
    from servesize.measure.bench import BenchConfig, measure_bench
    from servesize.measure.record import RunRecord

    if not args.url:
        raise BadInput("measure bench needs --url, the server to measure (e.g. http://localhost:8000)")
    check_url(args.url, "bench")
    cfg = BenchConfig(url=args.url, load=load_of(args), model=args.model, api=args.api, timeout_s=args.timeout,
                      stall_timeout_s=args.stall_timeout)
    rec = Recording(args.url, args.record, None, args.fsync, args.quiet)
    path = args.record or time.strftime("servesize-bench-%Y%m%d-%H%M%S.jsonl")
    record = RunRecord.create(path, "bench", cfg.to_params(), fsync=args.fsync, resumable=False)
    return run_recorded(rec, record, lambda progress: measure_bench(cfg, record=record, progress=progress))
