"""The catalogue as a table: each model's parameters, layers by kind, and KV bytes per token
(whole model, tensor parallel 1, a 16-bit cache) — ``servesize models`` and the explorer's
KV-cost-per-token reference.
"""

from __future__ import annotations

from dataclasses import field

from servesize.engine.kv_cache import kv_per_token
from servesize.frozen import frozen
from servesize.model.architecture import CHUNKED, FULL, GDN, MAMBA, MLA, SLIDING, Architecture
from servesize.model.catalogue import CatalogueEntry
from servesize.model.ledger import ParamLedger, parameter_ledger

KIND_SHORT = {FULL: "full", SLIDING: "sliding", CHUNKED: "chunked", MLA: "MLA", GDN: "GDN", MAMBA: "Mamba"}
UNITS = {
    "params": "parameters (count); total excludes MTP modules, active = per token as publishers count it (the input "
              "embedding lookup left out)",
    "kv_bytes_per_token": "bytes per token of context, whole model, 16-bit cache, full-attention + MLA layers",
    "windowed_bytes_per_token": "bytes per token for sliding/chunked layers, only up to window_tokens",
    "all_layers_bytes_per_token": "the calculator seed's figure: every attention layer as if full attention",
    "kv_bytes_per_1ki_tokens": "kv_bytes_per_token x 1024",
    "state_bytes_per_sequence": "GDN/Mamba recurrent + conv state per sequence (model dtype conv, ssm dtype state)",
}


@frozen
class ModelRow:
    key: str
    display: str
    hf_id: str
    source: str
    arch: Architecture = field(repr=False)
    ledger: ParamLedger = field(repr=False)
    entry: CatalogueEntry | None = field(repr=False, default=None)
    kv_bytes_per_token: int = 0
    windowed_bytes_per_token: int = 0
    window_tokens: int | None = None
    state_bytes_per_sequence: int = 0

    @property
    def layers_text(self) -> str:
        kinds = self.arch.kinds
        order = [GDN, MAMBA, SLIDING, CHUNKED, FULL, MLA]
        return " + ".join(f"{kinds[k]} {KIND_SHORT[k]}" for k in order if k in kinds)

    @property
    def quantisation_text(self) -> str:
        q = self.arch.quantization
        if q is None:
            return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(self.arch.dtype, self.arch.dtype)
        if q.method == "mixed":
            algos = sorted({a for _, a in q.per_module})
            return "mixed " + "/".join(a.replace("W4A16_", "") for a in algos)
        if q.block:
            return f"{q.method} {q.block[0]}x{q.block[1]}"
        return q.method

    def to_dict(self, explain: bool = False) -> dict:
        L = self.ledger
        params = {"total": L.total, "active": L.active_as_published, "active_with_embedding": L.active,
                  "total_with_mtp": L.total_with_mtp,
                  "groups": dict(L.groups), "linear": dict(L.linear), "notes": list(L.notes)}
        if explain:
            params["derivation"] = L.derivation.to_list()
        q = self.arch.quantization
        out = {
            "key": self.key, "display": self.display, "hf_id": self.hf_id, "source": self.source,
            "params": params,
            "layers": {"total": self.arch.num_layers, "by_kind": self.arch.kinds},
            "num_attention_heads": self.arch.num_attention_heads, "num_kv_heads": self.arch.num_kv_heads,
            "head_dim": self.arch.head_dim, "mla_latent": mla_latent_dim(self.arch),
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_bytes_per_1ki_tokens": self.kv_bytes_per_token * 1024,
            "windowed_bytes_per_token": self.windowed_bytes_per_token, "window_tokens": self.window_tokens,
            "all_layers_bytes_per_token": self.kv_bytes_per_token + self.windowed_bytes_per_token,
            "state_bytes_per_sequence": self.state_bytes_per_sequence,
            "quantization": {"method": q.method, "bits": q.bits, "source": q.source} if q else None,
            "dtype": self.arch.dtype,
            "warnings": list(self.arch.warnings),
        }
        if self.entry is not None:
            out["published"] = self.entry.to_dict()["published"]
            out["partial"] = self.entry.partial
        return out


def mla_latent_dim(arch: Architecture) -> int | None:
    """The MLA latent width a token stores (kv_lora_rank + qk_rope_head_dim), or None without MLA."""
    if arch.kv_lora_rank is None:
        return None
    return arch.kv_lora_rank + (arch.qk_rope_head_dim or 0)


@frozen
class ModelsResult:
    rows: tuple[ModelRow, ...]
    explain: bool = False
    exit_code: int = 0

    def to_dict(self) -> dict:
        return {"units": UNITS, "models": [r.to_dict(self.explain) for r in self.rows]}


def model_row(arch: Architecture, entry: CatalogueEntry | None, source: str) -> ModelRow:
    kv = kv_per_token(arch, "bfloat16", 1)
    return ModelRow(
        key=entry.key if entry else arch.name, display=entry.display if entry else arch.name,
        hf_id=entry.hf_id if entry else "", source=source, arch=arch, ledger=parameter_ledger(arch), entry=entry,
        kv_bytes_per_token=kv.growing_bytes_per_token, windowed_bytes_per_token=kv.windowed_bytes_per_token,
        window_tokens=kv.window_tokens, state_bytes_per_sequence=kv.state_bytes_per_sequence,
    )
