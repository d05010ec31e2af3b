"""servesize memory MODEL --gpus 1xH200 [vLLM flags]: the budget and pool for one deployment."""

from __future__ import annotations

from servesize.commands._engine import add_engine_arguments, add_model_and_gpus, deployment_from_args, gpus_from_args

HELP = "vLLM's memory budget and KV pool for one deployment, down to the lines it logs"
EPILOG = """\
examples:
  servesize memory llama-3.1-8b --gpus 1xH100
  servesize memory qwen3.6-27b --gpus 1xH200 --kv-cache-dtype fp8 --max-model-len 180k --explain
  servesize memory qwen3-14b --gpus 1xA100 --kv-cache-memory-bytes 6.51GiB --max-model-len 32768 --vllm-version 0.11
  servesize memory ./my-model/config.json --gpus 2xL40S -tp 2 --json
"""


def add_arguments(parser) -> None:
    add_model_and_gpus(parser)
    add_engine_arguments(parser)


def run(args):
    from servesize.engine.memory import memory_report
    from servesize.model.catalogue import resolve_model

    model = resolve_model(args.model)
    gpus = gpus_from_args(args)
    return memory_report(model.architecture, gpus, deployment_from_args(args), budget=args.budget, name=model.entry.key if model.entry else model.architecture.name)
