"""What a checkpoint stores its weights in: a 16/32-bit dtype, and what its ``quantization_config``
says, one reader per ``quant_method``.

Fail closed: a method, bit width or algorithm without a reader here raises
``UnsupportedArchitecture`` naming the field — never a guess at its bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from servesize.errors import BadInput, UnsupportedArchitecture
from servesize.frozen import frozen

# config.json torch_dtype / dtype -> bytes per element
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "half": 2, "float": 4, "fp32": 4, "fp16": 2, "bf16": 2}


@frozen
class Quantization:
    """What the checkpoint itself says about its weights (``quantization_config``)."""

    method: str  # fp8 | int8 | int4 | mxfp4 | nvfp4 | mixed
    bits: int
    group_size: int | None = None  # int4/nvfp4 group; None = per-channel / per-tensor
    block: tuple[int, int] | None = None  # fp8 block scales (128, 128)
    unquantized: tuple[str, ...] = ()  # module patterns left at 16 bits
    per_module: tuple[tuple[str, str], ...] = ()  # ModelOpt mixed: (module, algo)
    kv_cache_bits: int | None = None
    source: str = ""
    checkpoint_method: str = ""  # quantization_config.quant_method as written (what vLLM's --quantization must match)
    zero_point: bool = True  # integer formats: a zero point stored per group (GPTQ/AWQ) or not (symmetric)
    double_quant: bool = False  # bitsandbytes 4-bit: the absmax itself quantised to 8 bits


def parse_quantization(q: Any, family: str) -> Quantization | None:
    if not q:
        return None
    if not isinstance(q, Mapping):  # "fp8" as a string, a list: not what transformers writes
        raise BadInput(f"config field 'quantization_config' must be a JSON object with a quant_method, got {_shown(q)}")
    method = q.get("quant_method", "")
    if not isinstance(method, str):
        raise BadInput(f"config field 'quantization_config.quant_method' must be a string, got {_shown(method)}")
    method = method.lower()
    skip = _patterns(q.get("modules_to_not_convert") or q.get("ignore") or ())  # module patterns left at 16 bits
    read = _READERS.get(method)
    if read is None:
        raise UnsupportedArchitecture(family, f"quantization method {method!r} is not modelled", ("quantization_config.quant_method",))
    return replace(read(q, method, skip, family), checkpoint_method=method)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _patterns(value: Any) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise BadInput(f"config field 'quantization_config.modules_to_not_convert' must be a list of module names, got {_shown(value)}")
    return tuple(value)


def _whole(q: Mapping[str, Any], key: str, default: Any, lo: int, hi: int) -> Any:
    """quantization_config[key] as a whole number in [lo, hi], ``default`` when absent, else refused by name."""
    value = q.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())) \
            or not lo <= value <= hi:
        raise BadInput(f"config field 'quantization_config.{key}' must be a whole number in [{lo}, {hi:,}], got {_shown(value)}")
    return int(value)


def _fp8(q: Mapping[str, Any], method: str, skip: tuple[str, ...], family: str) -> Quantization:
    block = _block(q.get("weight_block_size"))
    scales = f" block {block[0]}x{block[1]}" if block else " per-tensor"
    return Quantization("fp8", 8, block=block, unquantized=skip, source="quantization_config: fp8" + scales)


def _block(value: Any, key: str = "weight_block_size") -> tuple[int, int] | None:
    """weight_block_size (or compressed-tensors' block_structure): absent (per-tensor scales) or two whole numbers
    >= 1 ([128, 128])."""
    if value is None:
        return None
    ok = isinstance(value, (list, tuple)) and len(value) == 2 and all(
        not isinstance(v, bool) and isinstance(v, int) and 1 <= v <= 1 << 20 for v in value)
    if not ok:
        raise BadInput(f"config field 'quantization_config.{key}' must be two whole numbers >= 1 "
                       f"(rows, columns: [128, 128]), got {_shown(value)}")
    return int(value[0]), int(value[1])


def _mxfp4(q: Mapping[str, Any], method: str, skip: tuple[str, ...], family: str) -> Quantization:
    # MXFP4: 4-bit E2M1 values with one shared 8-bit exponent per 32 values.
    return Quantization("mxfp4", 4, group_size=32, unquantized=skip, source="quantization_config: mxfp4 (group 32, e8m0 scale)")


def _integer(q: Mapping[str, Any], method: str, skip: tuple[str, ...], family: str) -> Quantization:
    """GPTQ / AWQ / AutoRound: integer weights with a scale (and zero) per group."""
    bits = _whole(q, "bits", None, 1, 16) or _whole(q, "w_bit", 4, 1, 16)
    if bits not in (2, 3, 4, 8):
        raise UnsupportedArchitecture(family, f"{method} {bits}-bit weights are not modelled", ("quantization_config.bits",))
    key = "group_size" if q.get("group_size") is not None else "q_group_size"
    group = _whole(q, key, 128, -1, 1 << 20)  # -1 (or 0): one scale per output channel
    return Quantization("int4" if bits == 4 else f"int{bits}", bits, group_size=group if group > 0 else None,
                        unquantized=skip, source=f"quantization_config: {method} {bits}-bit group {group}")


def _bitsandbytes(q: Mapping[str, Any], method: str, skip: tuple[str, ...], family: str) -> Quantization:
    """A pre-quantised bitsandbytes checkpoint: 4-bit (NF4/FP4) in blocks of 64 with an absmax per
    block (fp32, or 8-bit plus an fp32 per 256 blocks when double-quantised), or LLM.int8()."""
    if q.get("load_in_8bit"):
        return Quantization("int8", 8, unquantized=skip, source="quantization_config: bitsandbytes int8 (row-wise fp32 scale)",
                            zero_point=False)
    if not q.get("load_in_4bit", True):
        raise UnsupportedArchitecture(family, "bitsandbytes config neither 4-bit nor 8-bit", ("quantization_config",))
    double = bool(q.get("bnb_4bit_use_double_quant"))
    return Quantization("bnb4", 4, group_size=64, unquantized=skip, zero_point=False, double_quant=double,
                        source=f"quantization_config: bitsandbytes 4-bit {q.get('bnb_4bit_quant_type', 'fp4')}, block 64"
                        + (", double-quantised absmax" if double else ""))


def _fbgemm_fp8(q: Mapping[str, Any], method: str, skip: tuple[str, ...], family: str) -> Quantization:
    # FBGEMM fp8: fp8 weights with one fp32 scale per output channel (vLLM quantization/fbgemm_fp8.py).
    return Quantization("fp8", 8, unquantized=skip, source="quantization_config: fbgemm_fp8 (per-channel scales)")


def _mxfp8(q: Mapping[str, Any], method: str, skip: tuple[str, ...], family: str) -> Quantization:
    return Quantization("mxfp8", 8, group_size=32, unquantized=skip, source="quantization_config: mxfp8 (E8M0 scale per 32)")


def _compressed_tensors(q: Mapping[str, Any], method: str, skip: tuple[str, ...], family: str) -> Quantization:
    weights = _compressed_weights(q, family)
    widths = {_whole(w, "num_bits", 0, 0, 64) for w in weights}
    types = {str(w.get("type", "")) for w in weights}
    if len(widths) != 1:
        raise UnsupportedArchitecture(family, "compressed-tensors groups with different bit widths",
                                      ("quantization_config.config_groups",))
    b = widths.pop()
    group = next((g for g in (_whole(w, "group_size", None, 1, 1 << 20) for w in weights) if g), None)
    if b == 8 and types == {"float"} and any(str(w.get("strategy", "")).lower() == "block" for w in weights):
        # compressed-tensors' block strategy (QuantizationArgs: strategy "block", block_structure [128, 128]; the
        # FP8_BLOCK scheme of llm-compressor): the block-scaled FP8 kernels vLLM's CompressedTensorsW8A8Fp8 runs
        # for it, as for a native fp8 checkpoint's weight_block_size
        block = next((_block(w.get("block_structure"), "config_groups.*.weights.block_structure") for w in weights
                      if str(w.get("strategy", "")).lower() == "block"), None)
        if block is None:
            raise BadInput("config field 'quantization_config.config_groups.*.weights': strategy 'block' without "
                           "its block_structure (rows, columns: [128, 128])")
        return Quantization("fp8", 8, block=block, unquantized=skip,
                            source=f"quantization_config: compressed-tensors fp8 block {block[0]}x{block[1]}")
    return _compressed_scheme(b, types, group, all(w.get("symmetric", True) for w in weights), skip, family)


def _compressed_weights(q: Mapping[str, Any], family: str) -> list[Mapping[str, Any]]:
    """Each config group's ``weights`` scheme: config_groups must map names to {weights: {...}}, at least one."""
    groups = q.get("config_groups") or {}
    field = ("quantization_config.config_groups",)
    if not isinstance(groups, Mapping) or not all(isinstance(g, Mapping) and isinstance(g.get("weights") or {}, Mapping)
                                                  for g in groups.values()):
        raise UnsupportedArchitecture(family, "compressed-tensors config_groups must map names to {weights: {...}}", field)
    weights = [g.get("weights") or {} for g in groups.values()]
    if not weights:
        raise UnsupportedArchitecture(family, "compressed-tensors config without config_groups", field)
    return weights


def _compressed_scheme(b: int, types: set[str], group: int | None, symmetric: bool, skip: tuple[str, ...],
                       family: str) -> Quantization:
    """The weight format one bit width and number type (with or without groups) of compressed-tensors stands for."""
    if b == 8 and types == {"float"}:
        return Quantization("fp8", 8, unquantized=skip, source="quantization_config: compressed-tensors fp8")
    if b == 8 and types == {"int"} and not group:
        return Quantization("int8", 8, unquantized=skip, zero_point=False, source="quantization_config: compressed-tensors int8")
    if b in (4, 8) and types == {"int"} and group:
        return Quantization(f"int{b}", b, group_size=int(group), unquantized=skip, zero_point=not symmetric,
                            source=f"quantization_config: compressed-tensors int{b} group {group}"
                            + (" symmetric" if symmetric else " with zero points"))
    if b == 4 and types == {"int"}:
        return Quantization("int4", 4, group_size=None, unquantized=skip, zero_point=False,
                            source="quantization_config: compressed-tensors int4 per channel")
    if b == 4 and types == {"float"}:
        return Quantization("nvfp4", 4, group_size=int(group or 16), unquantized=skip,
                            source="quantization_config: compressed-tensors nvfp4")
    raise UnsupportedArchitecture(family, f"compressed-tensors {b}-bit {types} weights are not modelled",
                                  ("quantization_config.config_groups",))


# ModelOpt per-module algorithms servesize knows the bytes of.
_MODELOPT_ALGOS = {"FP8", "NVFP4", "W4A16_NVFP4", "W4A8_NVFP4_FP8"}


def _modelopt(q: Mapping[str, Any], method: str, skip: tuple[str, ...], family: str) -> Quantization:
    algo = str(q.get("quant_algo", "")).upper()
    kv = q.get("kv_cache_scheme") or {}
    if not isinstance(kv, Mapping):
        raise BadInput(f"config field 'quantization_config.kv_cache_scheme' must be a JSON object, got {_shown(kv)}")
    kv_bits = _whole(kv, "num_bits", None, 1, 64) or None
    if q.get("quantized_layers"):
        return _modelopt_mixed(q, algo, skip, kv_bits, family)
    if algo == "FP8":
        return Quantization("fp8", 8, unquantized=skip, kv_cache_bits=kv_bits, source="quantization_config: modelopt FP8")
    if algo in ("NVFP4", "W4A16_NVFP4"):
        return Quantization("nvfp4", 4, group_size=16, unquantized=skip, kv_cache_bits=kv_bits,
                            source="quantization_config: modelopt NVFP4")
    raise UnsupportedArchitecture(family, f"ModelOpt quant_algo {algo!r} is not modelled", ("quantization_config.quant_algo",))


def _modelopt_mixed(q: Mapping[str, Any], algo: str, skip: tuple[str, ...], kv_bits: int | None, family: str) -> Quantization:
    """ModelOpt ``quantized_layers``: an algorithm per module (e.g. NVFP4 experts, FP8 attention)."""
    layers = q["quantized_layers"]
    if not isinstance(layers, Mapping) or not all(isinstance(spec, Mapping) for spec in layers.values()):
        raise UnsupportedArchitecture(family, "ModelOpt quantized_layers must map module names to {quant_algo: ...}",
                                      ("quantization_config.quantized_layers",))
    per_module = tuple((name, str(spec.get("quant_algo", "")).upper()) for name, spec in layers.items())
    unknown = sorted({a for _, a in per_module if a not in _MODELOPT_ALGOS})
    if unknown:
        raise UnsupportedArchitecture(family, f"ModelOpt algorithms {unknown} are not modelled", ("quantization_config.quantized_layers",))
    return Quantization("mixed", 4, group_size=16, unquantized=skip, per_module=per_module, kv_cache_bits=kv_bits,
                        source=f"quantization_config: modelopt {algo} ({len(per_module)} modules listed)")


# quant_method (lower case) -> its reader. Anything else is refused.
_READERS: dict[str, Callable[[Mapping[str, Any], str, tuple[str, ...], str], Quantization]] = {
    "fp8": _fp8,
    "mxfp4": _mxfp4,
    **dict.fromkeys(("gptq", "awq", "gptq_marlin", "awq_marlin", "auto-round", "autoround"), _integer),
    "bitsandbytes": _bitsandbytes,
    "fbgemm_fp8": _fbgemm_fp8,
    "mxfp8": _mxfp8,
    "compressed-tensors": _compressed_tensors,
    "modelopt": _modelopt,
}
