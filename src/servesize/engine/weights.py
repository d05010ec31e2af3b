"""Weight bytes per GPU, by precision, sharded across tensor-parallel ranks.

Following the calculator seed (../shared/seeds/002_*.txt, "The arithmetic"): embeddings and the
LM head stay at 16 bits unless the checkpoint quantises them; quantised matrices cost
``bits/8`` bytes per weight plus a scale overhead (0.125 bit/weight at 8-bit, 0.156 at 4-bit:
a group-128 fp16 scale, plus a packed 4-bit zero point at 4-bit). Formats that define their
own scales (MXFP4: one 8-bit exponent per 32 values; NVFP4: one fp8 scale per 16) use them,
and so does a checkpoint whose ``quantization_config`` says otherwise (fp8 with 128x128
blocks: one fp32 scale per 16,384 weights).
"""

from __future__ import annotations

from dataclasses import dataclass

from servesize.derivation import Derivation
from servesize.errors import BadInput
from servesize.model.architecture import DTYPE_BYTES, Architecture
from servesize.model.ledger import ParamLedger, parameter_ledger

# precision -> (bits per weight, scale overhead in bits per weight, why)
PRECISIONS: dict[str, tuple[int, float, str]] = {
    "bf16": (16, 0.0, "16-bit weights, no scales"),
    "fp16": (16, 0.0, "16-bit weights, no scales"),
    "fp8": (8, 0.125, "calculator seed: group-128 fp16 scale = 16/128 bit"),
    "int8": (8, 0.125, "calculator seed: group-128 fp16 scale = 16/128 bit"),
    "int4": (4, 0.156, "calculator seed: g128 fp16 scale + 4-bit zero = (16+4)/128 bit"),
    "mxfp4": (4, 0.25, "OCP MX: one 8-bit (E8M0) scale per 32 values = 8/32 bit"),
    "nvfp4": (4, 0.5, "NVFP4: one fp8 (E4M3) scale per 16 values = 8/16 bit"),
}
PRECISION_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "auto": "native", "awq": "int4",
                     "gptq": "int4", "fp8_e4m3": "fp8", "w4a16": "int4", "w8a8": "int8"}

# Groups whose matrices a quantiser converts. Embedding and LM head stay 16-bit unless the
# checkpoint says otherwise; norms, biases, conv kernels, routers and vision towers stay 16-bit.
QUANTISABLE_GROUPS = ("attention", "linear_attention", "mlp", "experts", "shared_experts", "indexer", "mtp")
# Groups vLLM shards across TP ranks (vocab-parallel embedding and LM head included).
REPLICATED_GROUPS = ("norms", "router")


def normalise_precision(name: str) -> str:
    key = PRECISION_ALIASES.get(name.lower(), name.lower())
    if key != "native" and key not in PRECISIONS:
        raise BadInput(f"precision {name!r} is not one of native, {', '.join(PRECISIONS)}")
    return key


@dataclass(frozen=True)
class GroupBytes:
    group: str
    params: int
    quantised_params: int
    bits: float  # bits per quantised weight including scale overhead
    bytes: int
    sharded: bool


@dataclass(frozen=True)
class Weights:
    precision: str
    tp: int
    groups: tuple[GroupBytes, ...]
    total_bytes: int
    per_gpu_bytes: int
    ledger: ParamLedger
    derivation: Derivation

    def to_dict(self) -> dict:
        return {
            "precision": self.precision, "tensor_parallel_size": self.tp,
            "total_bytes": self.total_bytes, "per_gpu_bytes": self.per_gpu_bytes,
            "groups": {g.group: {"params": g.params, "quantised_params": g.quantised_params,
                                 "bits_per_quantised_weight": g.bits, "bytes": g.bytes, "sharded": g.sharded}
                       for g in self.groups},
        }


def _native_group_bits(arch: Architecture, group: str) -> float | None:
    """Bits per weight the checkpoint stores a group's matrices in; None = unquantised."""
    q = arch.quantization
    if q is None or group not in QUANTISABLE_GROUPS:
        return None
    if q.method == "fp8":
        # Block-wise fp8 (128x128): one fp32 scale per block; per-tensor fp8: negligible.
        scale_bits = 32 / (q.block[0] * q.block[1]) if q.block else 0.0
        return 8 + scale_bits
    if q.method == "mxfp4":
        return 4 + 8 / 32 if group in ("experts",) else None  # gpt-oss: only the experts are MXFP4
    if q.method == "nvfp4":
        return 4 + 8 / 16
    if q.method in ("int4", "int8"):
        g = q.group_size
        scale_bits = (16 + q.bits) / g if g else 0.0
        return q.bits + scale_bits
    if q.method == "mixed":
        marker = {"attention": ("self_attn",), "linear_attention": ("linear_attn",), "experts": ("experts",),
                  "shared_experts": ("shared_expert",), "mlp": ("mlp.",), "mtp": ("mtp",)}.get(group, ())
        algos = [a for name, a in q.per_module if any(m in name for m in marker)
                 and not (group == "mlp" and ("experts" in name or "shared_expert" in name))]
        if not algos:
            return None
        algo = max(set(algos), key=algos.count)
        return 8.0 if algo == "FP8" else 4 + 8 / 16
    return None


def weights(arch: Architecture, precision: str = "native", tp: int = 1, *, dtype: str | None = None,
            include_mtp: bool = False, ledger: ParamLedger | None = None) -> Weights:
    """Weight bytes for the whole model and per GPU under tensor parallelism ``tp``.

    ``precision`` is ``native`` (what the checkpoint stores) or one of PRECISIONS applied to
    every quantisable matrix; ``dtype`` is the 16-bit type of everything left unquantised.
    """
    precision = normalise_precision(precision)
    ledger = ledger or parameter_ledger(arch)
    high_bytes = DTYPE_BYTES[dtype] if dtype and dtype != "auto" else arch.dtype_bytes
    d = Derivation()
    groups: list[GroupBytes] = []
    for group, params in ledger.groups.items():
        if params == 0 or (group == "mtp" and not include_mtp):
            continue
        linear = ledger.linear.get(group, 0)
        if precision == "native":
            bits = _native_group_bits(arch, group)
        elif group in QUANTISABLE_GROUPS and PRECISIONS[precision][0] < 16:
            bits = PRECISIONS[precision][0] + PRECISIONS[precision][1]
        else:
            bits = None
        if bits is None:
            n_bytes = d.step(f"{group}_bytes", "params * bytes_16bit", unit="B", params=params, bytes_16bit=high_bytes)
            quantised = 0
            bits_out = 8.0 * high_bytes
        else:
            n_bytes = d.step(f"{group}_bytes", "quantised * bits / 8 + (params - quantised) * bytes_16bit", unit="B",
                             quantised=linear, bits=round(bits, 5), params=params, bytes_16bit=high_bytes)
            quantised = linear
            bits_out = bits
        groups.append(GroupBytes(group, params, quantised, bits_out, int(n_bytes), group not in REPLICATED_GROUPS))
    sharded = sum(g.bytes for g in groups if g.sharded)
    replicated = sum(g.bytes for g in groups if not g.sharded)
    total = d.step("weights_bytes", "sharded + replicated", unit="B", sharded=sharded, replicated=replicated)
    per_gpu = d.step("weights_bytes_per_gpu", "ceil(sharded / tp) + replicated", unit="B",
                     sharded=sharded, tp=tp, replicated=replicated,
                     note="matrices, embedding and LM head split across TP ranks; norms and routers replicated")
    label = precision if precision != "native" else f"native ({arch.quantization.method if arch.quantization else arch.dtype})"
    return Weights(label, tp, tuple(groups), int(total), int(per_gpu), ledger, d)
