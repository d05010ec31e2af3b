"""servesize fit --gpus 4xH100 [--context 8k]: what these GPUs can serve."""

from __future__ import annotations

from servesize.flags import add_params, fit_query_from_args
from servesize.scenario import FIT_PARAMS, FitQuery

HELP = "what can these GPUs serve: models x precision x placement, with concurrency"
EPILOG = """\
examples:
  servesize fit --gpus 4xH100                        bf16, fp8 and int4, at 8k context
  servesize fit --gpus 4xH100 --precision bf16 --budget simple    the calculator seed's table
  servesize fit --gpus 8xH200 --context 128k --kv-cache-dtype fp8 --json
  servesize fit --gpus 2xRTX4090 --models llama-3.1-8b,qwen3-8b --all-placements --explain
"""


def add_arguments(parser) -> None:
    add_params(parser, FIT_PARAMS.values(), required=("gpus",), declared_by=FitQuery)


def run(args):
    from servesize.api import fit

    return fit(fit_query_from_args(args))
