"""``servesize bench MODEL --gpus ... [vLLM flags] [vllm bench serve flags]``: what the benchmark will print."""

from __future__ import annotations

import argparse
import math

from servesize.errors import BadInput
from servesize.flags import add_params, scenario_from_args
from servesize.scenario import PARAMS, params_in

EPILOG = """\
the load, in `vllm bench serve`'s own flags (its random dataset; every request gets all its output tokens):
  --random-input-len, --random-output-len, --random-range-ratio, --random-prefix-len, --num-prompts,
  --max-concurrency (C requests in flight), --request-rate (a Poisson stream; inf: all at once), --seed,
  --ready-check-timeout-sec (above 0: the first prompt sent alone before the run, as benchmark_serving.py did)

the deployment, in `vllm serve`'s flags (or a pasted --vllm-serve '...' line): --tensor-parallel-size,
--max-num-seqs, --max-num-batched-tokens, --kv-cache-dtype, --gpu-memory-utilization, ...

what it prints: the benchmark's result block, predicted by the engine simulator (vLLM's scheduler step by
step, priced by servesize's step model: docs/accuracy.md says how close it is on measured runs held out from
its fit). --json prints the keys `vllm bench serve --save-result` writes (mean_ttft_ms, median_tpot_ms, ...).

examples:
  servesize bench llama-3.1-8b --gpus 1xH100 --random-input-len 1024 --random-output-len 128 --num-prompts 1000 --max-concurrency 64
  servesize bench qwen3-30b-a3b-fp8 --gpus 1xH200 --random-input-len 2048 --max-concurrency 10 --json
  servesize bench llama-3.1-70b --gpus 4xH100 -tp 4 --request-rate 4 --num-prompts 500
  servesize bench llama-3.1-8b --gpus 1xH100 --calibration cal.json   (calibrate --vllm-bench: your own server's)
"""


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise BadInput(f"expected a whole number, got {text!r}") from None


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BadInput(f"expected a number, got {text!r}") from None
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params(parser, [*params_in("model", "engine"), PARAMS["calibration"], PARAMS["calibration_mismatch_ok"],
                        PARAMS["bandwidth_efficiency"], PARAMS["mfu"]], required=("gpus",))
    add_load_arguments(parser)


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    """The load in ``vllm bench serve``'s flags (its random dataset), for ``bench`` (predicted) and ``measure bench``
    (measured), declared once; BenchLoad checks their bounds."""
    g = parser.add_argument_group("the load (vllm bench serve's flags, --dataset-name random)")
    g.add_argument("--random-input-len", type=_whole, default=1024, metavar="N", help="prompt tokens (default 1024)")
    g.add_argument("--random-output-len", type=_whole, default=128, metavar="N", help="output tokens (default 128)")
    g.add_argument("--random-range-ratio", type=_number, default=0.0, metavar="R",
                   help="lengths uniform in [N(1-R), N(1+R)] (default 0: fixed)")
    g.add_argument("--random-prefix-len", type=_whole, default=0, metavar="N",
                   help="a prefix every prompt shares, before its own tokens (default 0)")
    g.add_argument("--num-prompts", type=_whole, default=1000, metavar="N", help="requests sent (default 1000)")
    g.add_argument("--max-concurrency", type=_whole, default=None, metavar="C",
                   help="requests in flight at most; the next is sent as one finishes (default: no cap)")
    g.add_argument("--request-rate", type=_number, default=math.inf, metavar="R",
                   help="requests per second, Poisson (default inf: all at once, or C at a time)")
    g.add_argument("--seed", type=_whole, default=0, help="seed of the lengths and arrivals (default 0)")
    g.add_argument("--ignore-eos", action="store_true",
                   help="every request generates all its output tokens (ignore_eos in the request), as vllm bench "
                        "serve --ignore-eos does; without it the model may stop at EOS sooner")
    g.add_argument("--ready-check-timeout-sec", type=_whole, default=0, metavar="S",
                   help="above 0: the first request is sent alone and answered before the run (vllm bench serve's "
                        "ready check), leaving its prompt in the prefix cache. Default 0: skipped, as vLLM does "
                        "since PR #30975 (2025-12-18); benchmark_serving.py and earlier releases always sent it")


def load_of(args):
    """The BenchLoad of the load flags."""
    from servesize.simulate.bench import BenchLoad

    return BenchLoad(random_input_len=args.random_input_len, random_output_len=args.random_output_len,
                     random_range_ratio=args.random_range_ratio, random_prefix_len=args.random_prefix_len,
                     num_prompts=args.num_prompts, max_concurrency=args.max_concurrency,
                     request_rate=args.request_rate, random_seed=args.seed, ignore_eos=args.ignore_eos,
                     ready_check=_ready_check(args.ready_check_timeout_sec))


def _ready_check(seconds: int) -> bool:
    if seconds < 0:
        raise BadInput(f"--ready-check-timeout-sec must be >= 0 (0: skip the ready check), got {seconds}")
    return seconds > 0


def run(args):
    from servesize.api import bench

    return bench(scenario_from_args(args), load_of(args))
