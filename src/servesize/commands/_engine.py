"""Engine flags shared by memory, plan, fit and measure: vLLM's own names and meanings."""

from __future__ import annotations

import argparse

from servesize.engine.deployment import Deployment
from servesize.engine.kv_cache import KV_CACHE_DTYPES
from servesize.engine.versions import DEFAULT_VLLM_VERSION
from servesize.units import parse_bytes, parse_tokens


def _tokens(text: str) -> int:
    return parse_tokens(text)


def _bytes(text: str) -> int:
    return parse_bytes(text)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be in (0, 1]")
    return value


def add_model_and_gpus(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL",
                        help="catalogue name (servesize models), Hugging Face id, or path to a config.json / model folder")
    parser.add_argument("--gpus", required=True, metavar="NxGPU", help="e.g. 1xH200, 4xH100 (servesize gpus lists them)")
    parser.add_argument("--gpu-memory", type=_bytes, metavar="BYTES",
                        help="override the GPU's memory as nvidia-smi reports it, e.g. 81559MiB")


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("vLLM engine flags (same names and meanings as vllm serve)")
    g.add_argument("--tensor-parallel-size", "-tp", type=_positive_int, default=1, metavar="N")
    g.add_argument("--data-parallel-size", "-dp", type=_positive_int, default=1, metavar="N")
    g.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float16", "half", "float32"],
                   help="dtype of unquantised weights (default: the config's)")
    g.add_argument("--quantization", "-q", default="native", metavar="FORMAT",
                   help="native (the checkpoint's own), bf16, fp8, int8, int4 (AWQ/GPTQ g128), mxfp4, nvfp4")
    g.add_argument("--kv-cache-dtype", default="auto", choices=list(KV_CACHE_DTYPES), help="KV cache element type")
    g.add_argument("--gpu-memory-utilization", type=_fraction, metavar="U",
                   help="fraction of GPU memory vLLM may use (default: 0.90 before v0.20, 0.92 from v0.20)")
    g.add_argument("--max-model-len", type=_tokens, metavar="TOKENS", help="e.g. 32768 or 32k (default: the model's)")
    g.add_argument("--max-num-seqs", type=_positive_int, metavar="N", help="default: 1024 on >=70 GiB GPUs, else 256")
    g.add_argument("--max-num-batched-tokens", type=_tokens, metavar="TOKENS",
                   help="the profile batch; the activation reserve grows with it (default 8192 / 2048)")
    g.add_argument("--block-size", type=_positive_int, metavar="TOKENS", help="KV block size (default 16; MLA backends force 64/128)")
    g.add_argument("--kv-cache-memory-bytes", "--kv-cache-memory", type=_bytes, metavar="BYTES",
                   help="KV memory per GPU, taken as given (vLLM then ignores the utilisation budget)")
    g.add_argument("--num-gpu-blocks-override", type=_positive_int, metavar="N")
    g.add_argument("--no-enable-prefix-caching", dest="enable_prefix_caching", action="store_false")
    g.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs (nothing reserved for them)")
    g.add_argument("--mamba-ssm-cache-dtype", default=None, choices=["auto", "float32", "bfloat16", "float16"],
                   help="recurrent-state dtype for GDN/Mamba layers (default: the config's mamba_ssm_dtype)")
    g.add_argument("--mamba-cache-mode", default=None, choices=["none", "align"],
                   help="recurrent-state blocks per request: none = 1, align = 2 (default: align with prefix caching, which hybrids get from v0.26)")
    g.add_argument("--num-speculative-tokens", type=int, default=0, metavar="K",
                   help="MTP/EAGLE draft tokens (adds the MTP weights and a state slot)")
    g.add_argument("--vllm-version", default=DEFAULT_VLLM_VERSION, metavar="X.Y.Z",
                   help=f"engine version whose rules apply (log formula, defaults, CUDA graphs); default {DEFAULT_VLLM_VERSION}")
    g.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: vLLM's CPU build (block size multiple of 32)")
    parser.add_argument("--budget", default="engine", choices=["engine", "simple"],
                        help="engine: vLLM's own budget with a named reserve estimate; simple: the calculator seed's "
                             "(utilisation minus weights)")


def deployment_from_args(args) -> Deployment:
    return Deployment(
        tensor_parallel_size=args.tensor_parallel_size,
        data_parallel_size=args.data_parallel_size,
        dtype=args.dtype,
        quantization=args.quantization,
        kv_cache_dtype=args.kv_cache_dtype,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        block_size=args.block_size,
        kv_cache_memory_bytes=args.kv_cache_memory_bytes,
        num_gpu_blocks_override=args.num_gpu_blocks_override,
        enable_prefix_caching=args.enable_prefix_caching,
        enforce_eager=args.enforce_eager,
        mamba_ssm_cache_dtype=args.mamba_ssm_cache_dtype,
        mamba_cache_mode=args.mamba_cache_mode,
        num_speculative_tokens=args.num_speculative_tokens,
        vllm_version=args.vllm_version,
        device=args.device,
    )


def gpus_from_args(args):
    from servesize.model.hardware import parse_gpus

    return parse_gpus(args.gpus, memory=getattr(args, "gpu_memory", None))
