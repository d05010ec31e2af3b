"""servesize fit --gpus 4xH100 [--context 8k]: what these GPUs can serve."""

from __future__ import annotations

from servesize.commands._engine import _fraction, _tokens
from servesize.engine.kv_cache import KV_CACHE_DTYPES

HELP = "what can these GPUs serve: models x precision x placement, with concurrency"
EPILOG = """\
examples:
  servesize fit --gpus 4xH100                        bf16, fp8 and int4, at 8k context
  servesize fit --gpus 4xH100 --precision bf16 --budget simple    the calculator seed's table
  servesize fit --gpus 8xH200 --context 128k --kv-cache-dtype fp8 --json
  servesize fit --gpus 2xRTX4090 --models llama-3.1-8b,qwen3-8b --all-placements --explain
"""


def add_arguments(parser) -> None:
    from servesize.engine.placement import DEFAULT_MIN_CONCURRENCY

    parser.add_argument("--gpus", required=True, metavar="NxGPU", help="e.g. 4xH100 (servesize gpus lists them)")
    parser.add_argument("--context", type=_tokens, default=8192, metavar="TOKENS", help="tokens per sequence (default 8k)")
    parser.add_argument("--precision", metavar="LIST",
                        help="comma list of native, bf16, fp16, fp8, int8, int4, mxfp4, nvfp4 (default: a quantised "
                             "checkpoint as it is; any other at bf16, fp8 and int4)")
    parser.add_argument("--models", metavar="LIST", help="comma list of catalogue names (default: the whole catalogue)")
    parser.add_argument("--budget", default="engine", choices=["engine", "simple"],
                        help="engine: vLLM's budget with its named reserve; simple: the calculator seed's")
    parser.add_argument("--kv-cache-dtype", default="auto", choices=list(KV_CACHE_DTYPES))
    parser.add_argument("--gpu-memory-utilization", type=_fraction, metavar="U")
    parser.add_argument("--vllm-version", metavar="X.Y.Z")
    parser.add_argument("--min-concurrency", type=int, default=DEFAULT_MIN_CONCURRENCY, metavar="N",
                        help=f"smallest per-replica concurrency a placement should reach (default {DEFAULT_MIN_CONCURRENCY})")
    parser.add_argument("--all-placements", action="store_true", help="list every TP x replicas placement that fits")


def run(args):
    from servesize.engine.placement import fit
    from servesize.model.catalogue import load_catalogue, resolve_model
    from servesize.model.hardware import parse_gpus

    gpus = parse_gpus(args.gpus)
    if args.models:
        models = []
        for name in args.models.split(","):
            m = resolve_model(name.strip())
            key = m.entry.key if m.entry else m.architecture.name
            models.append((key, m.entry.display if m.entry else key, m.architecture))
    else:
        models = [(e.key, e.display, e.architecture()) for e in load_catalogue().values()]
    precisions = tuple(p.strip() for p in args.precision.split(",") if p.strip()) if args.precision else None
    return fit(models, gpus, context=args.context, precisions=precisions, budget=args.budget,
               kv_cache_dtype=args.kv_cache_dtype, gpu_memory_utilization=args.gpu_memory_utilization,
               vllm_version=args.vllm_version, min_concurrency=args.min_concurrency, all_placements=args.all_placements)
