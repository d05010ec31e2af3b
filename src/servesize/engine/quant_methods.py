"""vLLM's --quantization methods, read with the checkpoint's own quantization_config.

``weight_format(arch, method, version)`` is what ``weights()`` takes: ``native`` when the method
reads the checkpoint as it is stored (its bytes come from the checkpoint's quantization_config),
an online format (data/quantization.toml) when vLLM quantises a 16-bit checkpoint at load time,
or one of servesize's own names (native, bf16, fp16, and the calculator seed's int8 / int4 /
nvfp4 conventions). A method the release does not accept, a method servesize has no bytes for,
or a checkpoint the method cannot read (vLLM's own "does not match" refusal) is one clear error.
"""

from __future__ import annotations

from functools import lru_cache

from servesize.datafiles import table
from servesize.engine.vocabulary import accepts, show_version, vocabulary
from servesize.errors import BadInput, UnsupportedArchitecture
from servesize.frozen import frozen
from servesize.model.architecture import Architecture

# servesize's own names: the checkpoint as stored, 16-bit, and the calculator seed's conventions.
SERVESIZE_NAMES = ("native", "auto", "bf16", "bfloat16", "fp16", "float16", "half", "int8", "int4", "nvfp4")


@lru_cache(maxsize=1)
def methods() -> dict[str, dict]:
    return table("quantization.toml")


@frozen
class WeightFormat:
    precision: str  # a key of engine.weights.PRECISIONS, or "native"
    how: str  # one line for the report


def _checkpoint_method(arch: Architecture) -> str | None:
    q = arch.quantization
    return q.checkpoint_method if q is not None else None


def _same_method(a: str, b: str) -> bool:
    return a.lower().replace("_", "-") == b.lower().replace("_", "-")


def check_vocabulary(quantization: str, kv_cache_dtype: str, version: tuple[int, int, int],
                     checkpoint_method: str | None = None) -> None:
    """--quantization and --kv-cache-dtype must be values this vLLM release accepts (or servesize's own
    names). A quantised checkpoint's own method name is accepted in either spelling (auto_round for
    auto-round): vLLM replaces the value with the checkpoint's override (ModelConfig._verify_quantization)."""
    name = quantization.strip()
    own = checkpoint_method is not None and _same_method(name, checkpoint_method)
    if name not in SERVESIZE_NAMES and not own and not accepts("quantization", name, version):
        raise BadInput(f"--quantization {name!r} is not a method vLLM {show_version(version)} accepts "
                       f"({', '.join(vocabulary('quantization', version))}); servesize also takes native, bf16, fp16, "
                       "int8, int4, nvfp4", field="quantization")
    if not accepts("kv_cache_dtype", kv_cache_dtype, version):
        raise BadInput(f"--kv-cache-dtype {kv_cache_dtype!r} is not one of the values vLLM {show_version(version)} "
                       f"accepts: {', '.join(vocabulary('kv_cache_dtype', version))}", field="kv_cache_dtype")


def weight_format(arch: Architecture, method: str, version: tuple[int, int, int]) -> WeightFormat:
    name = method.strip()
    stored = _checkpoint_method(arch)
    check_vocabulary(name, "auto", version, stored)
    if name in SERVESIZE_NAMES:
        return WeightFormat(name, "servesize precision" if name not in ("native", "auto") else "the checkpoint as stored")
    if stored is not None and _same_method(name, stored):
        return WeightFormat("native", f"{name}: the checkpoint's own method, read as stored")
    row = methods().get(name)
    if row is None:
        raise UnsupportedArchitecture(arch.model_type, f"--quantization {name} is vLLM's, but servesize has no bytes-per-weight "
                                      f"model for it (it models {', '.join(sorted(methods()))})", ("quantization",))
    if stored is not None:
        if stored in row.get("checkpoint", ()):
            return WeightFormat("native", f"{name} reads the checkpoint's {stored} weights as stored")
        raise BadInput(f"--quantization {name} does not match the checkpoint's quantization_config ({stored}); vLLM refuses "
                       f"the mismatch: drop --quantization (vLLM then uses {stored})", field="quantization")
    if row.get("refuse_online") or "online" not in row:
        raise BadInput(f"--quantization {name} reads checkpoints quantised for it, and {arch.name} is a 16-bit checkpoint "
                       f"(no quantization_config); vLLM refuses it", field="quantization")
    return WeightFormat(row["online"], f"{name}: vLLM quantises the 16-bit checkpoint at load time ({row['online']})")


# -- what a recipe passes to vLLM for the weights the plan sized ----------------------------------------

SIXTEEN_BIT_NAMES = ("bf16", "bfloat16", "fp16", "float16", "half")
# The calculator seed's conventions: weight formats, not vLLM methods. vLLM serves them from a checkpoint
# quantised so (it reads the quantization_config; no --quantization is needed).
SEED_FORMAT_CHECKPOINTS = {
    "int4": "an int4 weight-only checkpoint (AWQ, GPTQ or compressed-tensors W4A16)",
    "int8": "an int8 checkpoint (compressed-tensors W8A8 / W8A16 or GPTQ 8-bit)",
    "nvfp4": "an NVFP4 checkpoint (ModelOpt or compressed-tensors)",
}
# vLLM's online method closest to a seed convention, where a release has one (quantisation at load time).
SEED_FORMAT_ONLINE = {"int8": "int8_per_channel_weight_only", "nvfp4": "nvfp4_per_token"}


@frozen
class ServedWeights:
    """How a recipe serves the weights a plan sized: the --quantization value vLLM takes (None: vLLM reads the
    checkpoint's own quantization_config, or it is 16-bit), and, when the model's checkpoint cannot give those
    weights, the checkpoint it needs (the recipe then names a placeholder, never the model's own id)."""

    quantization: str | None = None
    needs: str | None = None         # e.g. "an int4 weight-only checkpoint (AWQ, GPTQ ...)"
    placeholder: str | None = None   # what the recipe serves instead of the checkpoint id
    online: str | None = None        # a vLLM online method that quantises the model's own checkpoint instead
    how: str = "vLLM reads its quantization_config, so no --quantization"


def served_weights(arch: Architecture, method: str, version: tuple[int, int, int]) -> ServedWeights:
    """What ``vllm serve`` must be given for the weights ``method`` sized (engine.weights via weight_format)."""
    name = method.strip()
    stored = arch.quantization
    if name in ("native", "auto"):
        return ServedWeights()
    if name in SIXTEEN_BIT_NAMES:
        if stored is None:
            return ServedWeights()
        return ServedWeights(needs="a 16-bit checkpoint", placeholder="<16-BIT-CHECKPOINT>",
                             how=f"vLLM does not de-quantise {stored.checkpoint_method or stored.method} weights")
    if name in SEED_FORMAT_CHECKPOINTS:
        if stored is not None and stored.method == name:
            return ServedWeights()
        online = SEED_FORMAT_ONLINE.get(name)
        return ServedWeights(needs=SEED_FORMAT_CHECKPOINTS[name], placeholder=f"<{name.upper()}-CHECKPOINT>",
                             online=online if online and stored is None and accepts("quantization", online, version)
                             else None)
    if not accepts("quantization", name, version):  # the checkpoint's own method in another spelling: vLLM reads it
        return ServedWeights()
    return ServedWeights(quantization=name)  # a vLLM method weight_format accepted: online, or the checkpoint's own
