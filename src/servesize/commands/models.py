"""``servesize models``: the catalogue — parameters, layers by kind, KV bytes per token, quantisation."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from servesize.engine.kv_cache import kv_per_token
from servesize.model.architecture import CHUNKED, FULL, GDN, MAMBA, MLA, SLIDING, Architecture
from servesize.model.catalogue import CatalogueEntry, load_catalogue, resolve_model
from servesize.model.ledger import ParamLedger, parameter_ledger
from servesize.units import KiB, MiB

HELP = "the model catalogue: parameters, layers, KV bytes per token"
EPILOG = """\
examples:
  servesize models                       every catalogue model: params, layers, KV bytes/token at 16 bits
  servesize models qwen3.5-27b --explain the parameter ledger of one model, term by term
  servesize models ./config.json         any config.json (or model folder, or Hugging Face id)
  servesize models --json                one JSON document

KV/token is for the whole model (tensor parallel 1) at a 16-bit cache: full-attention and MLA
layers grow with every token; sliding/chunked layers add '+N' only up to their window; Gated
DeltaNet / Mamba layers hold a constant state per sequence instead. KiB = 2**10 B, MiB = 2**20 B.
"""

KIND_SHORT = {FULL: "full", SLIDING: "sliding", CHUNKED: "chunked", MLA: "MLA", GDN: "GDN", MAMBA: "Mamba"}
UNITS = {
    "params": "parameters (count); total excludes MTP modules, active = per token",
    "kv_bytes_per_token": "bytes per token of context, whole model, 16-bit cache, full-attention + MLA layers",
    "windowed_bytes_per_token": "bytes per token for sliding/chunked layers, only up to window_tokens",
    "all_layers_bytes_per_token": "the calculator seed's figure: every attention layer as if full attention",
    "kv_bytes_per_1ki_tokens": "kv_bytes_per_token x 1024",
    "state_bytes_per_sequence": "GDN/Mamba recurrent + conv state per sequence (model dtype conv, ssm dtype state)",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", nargs="*", metavar="MODEL",
                        help="only these models: catalogue key, Hugging Face id, or a config.json path / model folder")


@dataclass(frozen=True)
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
        params = {"total": L.total, "active": L.active, "total_with_mtp": L.total_with_mtp,
                  "groups": dict(L.groups), "linear": dict(L.linear), "notes": list(L.notes)}
        if explain:
            params["derivation"] = L.derivation.to_list()
        q = self.arch.quantization
        out = {
            "key": self.key, "display": self.display, "hf_id": self.hf_id, "source": self.source,
            "params": params,
            "layers": {"total": self.arch.num_layers, "by_kind": self.arch.kinds},
            "num_attention_heads": self.arch.num_attention_heads, "num_kv_heads": self.arch.num_kv_heads,
            "head_dim": self.arch.head_dim, "mla_latent": _mla_latent(self.arch),
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


def _mla_latent(arch: Architecture) -> int | None:
    if arch.kv_lora_rank is None:
        return None
    return arch.kv_lora_rank + (arch.qk_rope_head_dim or 0)


@dataclass(frozen=True)
class ModelsResult:
    rows: tuple[ModelRow, ...]
    explain: bool = False
    exit_code: int = 0

    def to_dict(self) -> dict:
        return {"units": UNITS, "models": [r.to_dict(self.explain) for r in self.rows]}

    def render(self, explain: bool = False) -> str:
        header = ("model", "params", "layers", "heads", "KV", "hd", "KV/token", "KV/1Ki tok", "state/seq", "weights")
        table = [header]
        for r in self.rows:
            a = r.arch
            params = _billions(r.ledger.total)
            if r.ledger.num_experts:
                params += f" / {_billions(r.ledger.active)}"
            kv_heads = "MLA" if a.count(MLA) else (str(a.num_kv_heads) if any(l.is_attention for l in a.layers) else "-")
            head_dim = f"{_mla_latent(a)}L" if a.count(MLA) else str(a.head_dim)
            kv = _kib(r.kv_bytes_per_token)
            if r.windowed_bytes_per_token:
                kv += f" +{_kib(r.windowed_bytes_per_token)} ≤{_tokens(r.window_tokens)}"
            table.append((
                r.key + ("*" if r.entry is not None and r.entry.partial else ""),
                params, r.layers_text, str(a.num_attention_heads), kv_heads, head_dim, kv,
                f"{r.kv_bytes_per_token * 1024 / MiB:,.0f} MiB" if r.kv_bytes_per_token * 1024 % MiB == 0
                else f"{r.kv_bytes_per_token * 1024 / MiB:,.1f} MiB",
                f"{r.state_bytes_per_sequence / MiB:,.1f} MiB" if r.state_bytes_per_sequence else "-",
                r.quantisation_text,
            ))
        widths = [max(len(row[i]) for row in table) for i in range(len(header))]
        left = {0, 2, 9}
        lines = ["  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()
                 for row in table]
        lines += [
            "",
            "params: total (excluding MTP modules) / active per token for MoE, B = 10**9 parameters.",
            "KV/token: whole model, 16-bit cache, tensor parallel 1; full-attention and MLA layers (MLA: the latent, hd = its width).",
            "  '+N ≤W' = sliding/chunked layers, which stop growing at W tokens; state/seq = GDN/Mamba state, constant per sequence.",
            "KiB = 2**10 B, MiB = 2**20 B.  * = built from a partial config.",
        ]
        if explain:
            for r in self.rows:
                lines += ["", f"== {r.key} ({r.hf_id}) ==", f"config: {r.source}", r.ledger.explain()]
                if r.entry is not None and r.entry.published_params_text:
                    lines.append(f"published: {r.entry.published_params_text}"
                                 + (f" / {r.entry.published_active_text} active" if r.entry.published_active_text else "")
                                 + f" [source: {r.entry.published_source}]")
        return "\n".join(lines)


def _billions(n: int) -> str:
    b = n / 1e9
    return f"{b:,.0f}B" if b >= 100 else f"{b:.1f}B" if b >= 10 else f"{b:.2f}B"


def _kib(n: int) -> str:
    return f"{n / KiB:,.0f} KiB" if n % KiB == 0 else f"{n / KiB:,.2f} KiB"


def _tokens(n: int | None) -> str:
    return "-" if n is None else f"{n // 1024}k" if n % 1024 == 0 and n >= 1024 else str(n)


def build_row(arch: Architecture, entry: CatalogueEntry | None, source: str) -> ModelRow:
    kv = kv_per_token(arch, "bfloat16", 1)
    return ModelRow(
        key=entry.key if entry else arch.name, display=entry.display if entry else arch.name,
        hf_id=entry.hf_id if entry else "", source=source, arch=arch, ledger=parameter_ledger(arch), entry=entry,
        kv_bytes_per_token=kv.growing_bytes_per_token, windowed_bytes_per_token=kv.windowed_bytes_per_token,
        window_tokens=kv.window_tokens, state_bytes_per_sequence=kv.state_bytes_per_sequence,
    )


def run(args) -> ModelsResult:
    names = list(getattr(args, "model", None) or [])
    rows: list[ModelRow] = []
    if names:
        for name in names:
            resolved = resolve_model(name)
            source = resolved.entry.source if resolved.entry else resolved.origin
            rows.append(build_row(resolved.architecture, resolved.entry, source))
    else:
        for entry in load_catalogue().values():
            rows.append(build_row(entry.architecture(), entry, entry.source))
    return ModelsResult(tuple(rows), explain=bool(getattr(args, "explain", False)))
