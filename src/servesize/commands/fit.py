"""servesize fit --gpus 4xH100 [--max-model-len 8K]: what these GPUs can serve."""

from __future__ import annotations

from servesize.flags import add_params, fit_query_from_args
from servesize.scenario import FIT_PARAMS, FitQuery

EPILOG = """\
examples:
  servesize fit --gpus 4xH100                        each model at its own precision, 8,192 tokens (8K)
  servesize fit --gpus 4xH100 --all                  every precision (bf16, fp8, int4) and placement
  servesize fit --gpus 4xH100 --precision bf16 --budget simple    the calculator seed's table
  servesize fit --gpus 8xH200 --max-model-len 128K --kv-cache-dtype fp8 --json
  servesize fit --gpus 2xRTX-4090 --max-model-len 32k --models llama-3.1-70b --all --explain
                                                     why each placement is refused: weights or KV

Token counts read as vLLM reads them: 32k = 32,000, 32K = 32,768 (--context is --max-model-len's old name).
"""


def add_arguments(parser) -> None:
    add_params(parser, FIT_PARAMS.values(), required=("gpus",), declared_by=FitQuery)


def run(args):
    from servesize.api import fit

    return fit(fit_query_from_args(args))
