"""vLLM's --quantization methods, read with the checkpoint's own quantization_config.

``weight_format(arch, method, version)`` is what ``weights()`` takes: ``native`` when the method
reads the checkpoint as it is stored (its bytes come from the checkpoint's quantization_config),
an online format (data/quantization.toml) when vLLM quantises a 16-bit checkpoint at load time,
or one of servesize's own names (native, bf16, fp16, and the calculator seed's int8 / int4 /
nvfp4 conventions). A method the release does not accept, a method servesize has no bytes for,
or a checkpoint the method cannot read (vLLM's own "does not match" refusal) is one clear error.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from servesize.engine.vocabulary import accepts, show_version, vocabulary
from servesize.errors import BadInput, UnsupportedArchitecture
from servesize.model.architecture import Architecture

# servesize's own names: the checkpoint as stored, 16-bit, and the calculator seed's conventions.
SERVESIZE_NAMES = ("native", "auto", "bf16", "bfloat16", "fp16", "float16", "half", "int8", "int4", "nvfp4")


@lru_cache(maxsize=1)
def methods() -> dict[str, dict]:
    return tomllib.loads(resources.files("servesize").joinpath("data/quantization.toml").read_text(encoding="utf-8"))


@dataclass(frozen=True)
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
                       "int8, int4, nvfp4")
    if not accepts("kv_cache_dtype", kv_cache_dtype, version):
        raise BadInput(f"--kv-cache-dtype {kv_cache_dtype!r} is not one of the values vLLM {show_version(version)} "
                       f"accepts: {', '.join(vocabulary('kv_cache_dtype', version))}")


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
                       f"the mismatch: drop --quantization (vLLM then uses {stored})")
    if row.get("refuse_online") or "online" not in row:
        raise BadInput(f"--quantization {name} reads checkpoints quantised for it, and {arch.name} is a 16-bit checkpoint "
                       f"(no quantization_config); vLLM refuses it")
    return WeightFormat(row["online"], f"{name}: vLLM quantises the 16-bit checkpoint at load time ({row['online']})")
