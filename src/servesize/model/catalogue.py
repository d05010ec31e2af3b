"""The model catalogue (data/models.toml) and MODEL resolution: catalogue name, config path, or HF id.

Every entry carries the config.json fields servesize reads, where they came from (``source``),
and the published parameter counts with their own source. Loading is cheap (tomllib, no
numpy) and cached, so a command can walk the whole catalogue in well under a second.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Mapping
from dataclasses import field
from functools import cached_property, lru_cache
from typing import Any

from servesize.datafiles import table
from servesize.errors import BadInput, ServesizeError
from servesize.frozen import frozen
from servesize.jsonable import Record, json_as
from servesize.limits import check_depth, check_may_read
from servesize.model.architecture import Architecture, from_config, load_config_file
from servesize.model.ledger import parameter_ledger

_SCALE = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}


def parse_count(text: str | None) -> int | None:
    """``'30.5B'`` -> 30_500_000_000; ``None`` stays ``None``."""
    if text is None:
        return None
    s = str(text).strip().upper()
    if not s or s[-1] not in _SCALE:
        raise BadInput(f"published count {text!r} must end in K, M, B or T")
    return int(round(float(s[:-1]) * _SCALE[s[-1]]))


def count_granularity(text: str) -> float:
    """Half a unit of the last significant digit, relative to the value: '30.5B' -> 0.05/30.5.

    Trailing zeros of a whole number are not significant ('400B' is known to ±50B, '1T' to ±0.5T).
    """
    digits = str(text).strip()[:-1]
    if "." in digits:
        unit = 10.0 ** -len(digits.split(".", 1)[1])
    else:
        stripped = digits.rstrip("0") or "0"
        unit = 10.0 ** (len(digits) - len(stripped))
    return 0.5 * unit / float(digits)


def is_precise(text: str | None, tolerance: float = 0.01) -> bool:
    """Whether a published figure's own rounding is finer than ``tolerance`` (1%)."""
    return text is not None and count_granularity(text) <= tolerance


@frozen
class CatalogueEntry:
    key: str
    hf_id: str
    display: str
    source: str
    published_params: int | None
    published_active: int | None
    published_source: str
    config: dict = field(repr=False, compare=False)
    aliases: tuple[str, ...] = ()
    published_params_text: str | None = None
    published_active_text: str | None = None
    published_params_with_mtp_text: str | None = None
    published_active_counts_embedding: bool = True
    published_note: str = ""
    published_untestable: str = ""
    partial: bool = False

    @cached_property
    def _architecture(self) -> Architecture:
        return from_config(self.config, self.key)

    def architecture(self) -> Architecture:
        """The normalised Architecture (parsed once per entry)."""
        return self._architecture

    @property
    def published_params_with_mtp(self) -> int | None:
        return parse_count(self.published_params_with_mtp_text)

    def to_dict(self) -> dict:
        return {
            "key": self.key, "hf_id": self.hf_id, "display": self.display, "source": self.source,
            "aliases": list(self.aliases), "partial": self.partial,
            "published": {
                "params": self.published_params_text, "active": self.published_active_text,
                "params_with_mtp": self.published_params_with_mtp_text,
                "active_counts_embedding": self.published_active_counts_embedding,
                "source": self.published_source, "note": self.published_note or None,
                "untestable": self.published_untestable or None,
            },
        }


# ---------------------------------------------------------------------------------------
# compact forms in models.toml -> the config.json shapes architecture.py reads


def expand_config(config: dict) -> dict:
    """Expand the catalogue's compact forms back into config.json's own lists (see models.toml header)."""
    out = dict(config)
    if isinstance(out.get("text_config"), dict):
        out["text_config"] = _expand_text(out["text_config"])
        text = out["text_config"]
    else:
        out = _expand_text(out)
        text = out
    q = out.get("quantization_config")
    if isinstance(q, dict):
        out["quantization_config"] = _expand_quant(q, text)
    return out


def _expand_text(t: dict) -> dict:
    if "layer_types_cycle" not in t:
        return t
    t = dict(t)
    cycle = t.pop("layer_types_cycle")
    n = int(t["num_hidden_layers"])
    t["layer_types"] = [cycle[i % len(cycle)] for i in range(n)]
    return t


def _expand_quant(q: dict, text: dict) -> dict:
    q = dict(q)
    per = q.pop("modules_to_not_convert_per_layer", None)
    if per:
        n = int(text["num_hidden_layers"])
        q["modules_to_not_convert"] = list(q.get("modules_to_not_convert") or []) + [
            f"{per['prefix']}.{i}.{m}" for i in range(n) for m in per["modules"]]
    compact = q.pop("quantized_layers_per_layer", None)
    if compact:
        layers: dict[str, dict] = {}
        for i, kind in enumerate(text["layer_types"]):
            for spec in compact.get(kind, ()):
                layers[f"{compact['prefix']}.{i}.{spec['module']}"] = {k: v for k, v in spec.items() if k != "module"}
        for spec in compact.get("tail", ()):
            layers[spec["module"]] = {k: v for k, v in spec.items() if k != "module"}
        q["quantized_layers"] = layers
    return q


# ---------------------------------------------------------------------------------------
# loading


def _read_toml() -> dict:
    return table("models.toml")


@lru_cache(maxsize=1)
def load_catalogue() -> dict[str, CatalogueEntry]:
    """Every catalogue entry by key (lower-case, dashes), in file order."""
    out: dict[str, CatalogueEntry] = {}
    for key, row in _read_toml().items():
        if not row.get("source"):
            raise BadInput(f"models.toml entry {key!r} has no source")
        out[key] = CatalogueEntry(
            key=key,
            hf_id=row["hf_id"],
            display=row.get("display", key),
            source=row["source"],
            published_params=parse_count(row.get("published_params")),
            published_active=parse_count(row.get("published_active")),
            published_source=row.get("published_source", ""),
            config=expand_config(row["config"]),
            aliases=tuple(row.get("aliases", ())),
            published_params_text=row.get("published_params"),
            published_active_text=row.get("published_active"),
            published_params_with_mtp_text=row.get("published_params_with_mtp"),
            published_active_counts_embedding=bool(row.get("published_active_counts_embedding", True)),
            published_note=row.get("published_note", ""),
            published_untestable=row.get("published_untestable", ""),
            partial=bool(row.get("partial", False)),
        )
    return out


@lru_cache(maxsize=1)
def _index() -> dict[str, str]:
    """Lower-cased key, hf_id and aliases -> key."""
    idx: dict[str, str] = {}
    for key, e in load_catalogue().items():
        for name in (key, e.hf_id, *e.aliases):
            idx.setdefault(name.lower(), key)
    return idx


def find_entry(name: str) -> CatalogueEntry | None:
    key = _index().get(name.strip().lower())
    return load_catalogue()[key] if key else None


# ---------------------------------------------------------------------------------------
# MODEL resolution


@frozen
class ResolvedModel(Record):
    architecture: Architecture = field(metadata=json_as(None))  # written as its name
    entry: CatalogueEntry | None = field(metadata=json_as(None))  # written as its key
    origin: str  # "catalogue: <key>" | "file: <path>" | "huggingface: <id>"

    JSON_EXTRA = ("name", "catalogue_key")

    @property
    def name(self) -> str:
        return self.architecture.name

    @property
    def catalogue_key(self) -> str | None:
        return self.entry.key if self.entry else None


@frozen
class InlineConfig:
    """A config.json given as data (an upload, a test), not as a path: parsed, never stored or run.

    Held as canonical JSON text so a Scenario that carries it stays immutable and hashable."""

    text: str
    name: str = "uploaded config.json"

    @classmethod
    def of(cls, config: Mapping[str, Any], name: str | None = None) -> InlineConfig:
        if not isinstance(config, Mapping):
            raise BadInput(f"a model config must be a JSON object, got {type(config).__name__}")
        check_depth(config, "the model config")
        try:
            text = json.dumps(config, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise BadInput(f"the model config is not plain JSON: {str(exc)[:120]}") from None
        label = name or str(config.get("_name_or_path") or "") or "uploaded config.json"
        return cls(text, label)

    def config(self) -> dict:
        return json.loads(self.text)


def resolve_model(spec: str | InlineConfig) -> ResolvedModel:
    """MODEL as the CLI takes it: a catalogue key or HF id in the catalogue, a path, or an HF id;
    or a config.json's content (InlineConfig)."""
    if isinstance(spec, InlineConfig):
        return ResolvedModel(from_config(spec.config(), spec.name), None, f"inline: {spec.name}")
    if not spec or not str(spec).strip():
        raise BadInput("no model given: name one from `servesize models`, a config.json path, or a Hugging Face id")
    spec = str(spec).strip()
    entry = find_entry(spec)
    if entry is not None:
        return ResolvedModel(entry.architecture(), entry, f"catalogue: {entry.key}")
    check_may_read(spec, "model")  # the explorer: neither a path nor a download, not even a look
    path = _path(spec)
    if _exists(path) or spec.endswith(".json") or spec.startswith((".", "/", "~")):
        config = load_config_file(path)
        return ResolvedModel(_from_file(config, _name_from_path(path, config), path), None, f"file: {path}")
    if _looks_like_hf_id(spec):
        config_path = _hf_download(spec)
        return ResolvedModel(_from_file(load_config_file(config_path), spec, config_path), None, f"huggingface: {spec}")
    raise BadInput(_unknown_message(spec))


def _from_file(config: dict, name: str, path: object) -> Architecture:
    """from_config, its refusal naming the file it read (the field is named already)."""
    try:
        arch = from_config(config, name)
        parameter_ledger(arch)  # a field the parameter count reads (intermediate_size) is refused here, with the file
        return arch
    except ServesizeError as exc:
        exc.args = (f"{str(path)[-120:]}: {exc.args[0] if exc.args else exc}",)
        raise


def _path(spec: str) -> pathlib.Path:
    try:
        return pathlib.Path(spec).expanduser()
    except RuntimeError:  # ~nosuchuser
        raise BadInput(f"{spec[:80]!r}: no such user's home folder") from None


def _exists(path: pathlib.Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte
        return False


def _name_from_path(path: pathlib.Path, config: dict) -> str:
    if config.get("_name_or_path"):
        return str(config["_name_or_path"])
    folder = path if path.is_dir() else path.parent
    return folder.name or str(path)


def _looks_like_hf_id(spec: str) -> bool:
    parts = spec.split("/")
    return len(parts) == 2 and all(parts) and not any(c.isspace() for c in spec)


def _hf_download(repo_id: str) -> str:
    how = f"download {repo_id}'s config.json and pass its path (servesize memory ./config.json ...)"
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise BadInput(f"{repo_id!r} is not in servesize's catalogue and huggingface_hub is not installed: "
                       f"{how}, or `pip install huggingface_hub`") from None
    try:
        return hf_hub_download(repo_id, "config.json")
    except Exception as exc:  # offline, gated, missing repo: one line, never a traceback
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadInput(f"could not fetch config.json for {repo_id!r} from Hugging Face ({type(exc).__name__}: {reason[:160]}): "
                       f"{how}") from None


def _unknown_message(spec: str) -> str:
    names = list(load_catalogue())
    import difflib  # only to suggest a name after a miss

    close = difflib.get_close_matches(spec.lower(), names, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    shown = spec if len(spec) <= 80 else spec[:77] + "..."
    return (f"unknown model {shown!r}: {hint}servesize models lists them; "
            "or pass a config.json path, a model folder, or a Hugging Face id (org/name)")
