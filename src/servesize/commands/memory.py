"""servesize memory MODEL --gpus 1xH200 [vLLM flags]: the budget and pool for one deployment."""

from __future__ import annotations

from servesize.flags import add_params, scenario_from_args
from servesize.scenario import params_in

EPILOG = """\
examples:
  servesize memory llama-3.1-8b --gpus 1xH100
  servesize memory qwen3.6-27b --gpus 1xH200 --kv-cache-dtype fp8 --max-model-len 180k --explain
  servesize memory qwen3-14b --gpus 1xA100 --kv-cache-memory-bytes 6.51GiB --max-model-len 32768 --vllm-version 0.11
  servesize memory ./my-model/config.json --gpus 2xL40S -tp 2 --json
"""


def add_arguments(parser) -> None:
    add_params(parser, params_in("model", "engine"), required=("gpus",))


def run(args):
    from servesize.api import memory

    return memory(scenario_from_args(args))
