"""Workload presets (data/workloads.toml) as Workloads, and where each field of a workload came from.

A plan's workload is built in three layers, each replacing what the one before it says:

1. a preset: ``--preset``, else the one a workload file names, else ``coding-agent`` (the seed's);
2. a workload file (``servesize workload fit``): the fields it fitted from the user's own logs;
3. single flags (``--median``, ``--prefix``, ...).

``WorkloadOrigin`` records, field by field, which layer gave the value and with what source, and
carries the one-line notes a reader must see (a prefix longer than the sessions it belongs to is
refused before that; see ``servesize.resolve``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any

from servesize.errors import BadInput, clip
from servesize.frozen import frozen
from servesize.workload.catalogue import DEFAULT_PRESET, FIELDS, preset_names, preset_table
from servesize.workload.model import (
    FORMAT_KEY,
    FORMAT_VERSION,
    SCALAR_FIELDS,
    SessionClass,
    Workload,
    class_from_dict,
    think_mean_from,
)

# the cap a Workload needs when neither the preset nor a flag gives one; resolve replaces it with
# the model's own context (a Workload always has a cap)
UNCAPPED = 100_000_000


@frozen
class Preset:
    """One preset: every field's value and its source."""

    name: str
    description: str
    source: str
    values: Mapping[str, Any]
    sources: Mapping[str, str]

    @property
    def speculative(self) -> str:
        return str(self.values["speculative"])

    @property
    def has_subagents(self) -> bool:
        return "subagent_median_tokens" in self.values

    @property
    def max_model_len(self) -> int | None:
        cap = self.values.get("max_model_len")
        return None if cap is None else int(cap)

    def workload(self) -> Workload:
        """The preset as a Workload (capped at its own max_model_len, else UNCAPPED for resolve to set)."""
        v = self.values
        user = SessionClass("user", v["user_median_tokens"], v["user_sigma"], v["user_prefix_tokens"],
                            source=f"preset {self.name}: {self.sources['user_median_tokens']}")
        subagent = None
        if self.has_subagents:
            subagent = SessionClass("subagent", v["subagent_median_tokens"], v["subagent_sigma"],
                                    v["subagent_prefix_tokens"],
                                    source=f"preset {self.name}: {self.sources['subagent_median_tokens']}")
        return Workload(user=user, subagent=subagent, subagent_ratio=v.get("subagent_ratio", 0.0),
                        subagents_share_prefix=bool(v.get("subagents_share_prefix", False)),
                        invalidation=v["invalidation"], max_model_len=self.max_model_len or UNCAPPED,
                        think_time_s=v["think_time_s"], output_tokens=v["output_tokens"],
                        warm_turn_tokens=v["warm_turn_tokens"], session_turns=v.get("session_turns", 0))

    def summary(self) -> str:
        """One line: what the preset assumes."""
        v = self.values
        parts = [f"sessions median {v['user_median_tokens']:,} tokens (sigma {v['user_sigma']:g})",
                 f"prefix {v['user_prefix_tokens']:,}"]
        if self.has_subagents:
            parts.append(f"subagents r = {v['subagent_ratio']:g} (median {v['subagent_median_tokens']:,}, "
                         f"prefix {v['subagent_prefix_tokens']:,})")
        else:
            parts.append("no subagents")
        parts += [f"invalidation {v['invalidation']:g}", f"think {v['think_time_s']:g} s",
                  f"output {v['output_tokens']:,}", f"warm turn {v['warm_turn_tokens']:,}",
                  *([f"sessions of {v['session_turns']} requests"] if v.get("session_turns") else []),
                  "MTP where the model has a head" if self.speculative == "mtp" else "no speculative decoding"]
        if self.max_model_len:
            parts.append(f"cap {self.max_model_len:,}")
        return ", ".join(parts)

    def to_dict(self) -> dict:
        return {"name": self.name, "description": self.description, "source": self.source,
                "fields": {k: {"value": self.values[k], "source": self.sources[k]} for k in FIELDS if k in self.values}}


def preset(name: str | None = None) -> Preset:
    """A preset by name (None: the default, coding-agent); an unknown name lists the known ones."""
    key = DEFAULT_PRESET if name is None else str(name).strip()
    table = preset_table()
    if key not in table:
        raise BadInput(f"no workload preset {name!r}; presets: {', '.join(preset_names())}")
    raw = table[key]
    values = {f: raw[f]["value"] for f in FIELDS if f in raw}
    sources = {f: str(raw[f]["source"]) for f in FIELDS if f in raw}
    return Preset(key, raw["description"], raw["source"], values, sources)


def presets() -> list[Preset]:
    return [preset(n) for n in preset_names()]


# --------------------------------------------------------------------------------------------
# where each field came from
# --------------------------------------------------------------------------------------------

# Workload fields as origin names (the preset's field names)
ORIGIN_FIELDS = ("user_median_tokens", "user_sigma", "user_prefix_tokens", "subagent", "subagent_ratio",
                 "subagents_share_prefix", "invalidation", "max_model_len", "think_time_s", "output_tokens",
                 "warm_turn_tokens", "speculative", "think_time_sigma", "session_turns", "output_spread", "reuse_tokens")


@frozen
class WorkloadOrigin:
    """Which layer gave each workload field (preset, file, flag), with its source, and the notes to print."""

    preset: Preset
    sources: Mapping[str, str]
    file: str | None = None
    notes: tuple[str, ...] = field(default=())

    @classmethod
    def of_preset(cls, p: Preset) -> WorkloadOrigin:
        sources = {f: f"preset {p.name}: {p.sources[f]}" for f in ORIGIN_FIELDS if f in p.sources}
        if p.has_subagents:
            sources["subagent"] = f"preset {p.name}: {p.sources['subagent_median_tokens']}"
        else:
            sources["subagent"] = f"preset {p.name}: no subagent class"
        sources.setdefault("max_model_len", f"preset {p.name} gives none: the model's own context")
        sources.setdefault("think_time_sigma", f"preset {p.name} gives a mean only: pauses drawn exponential")
        sources.setdefault("session_turns", f"preset {p.name} gives none: no session turnover on top of its invalidation")
        sources.setdefault("output_spread", f"preset {p.name} gives none: every reply its output tokens long")
        sources.setdefault("reuse_tokens", f"preset {p.name} gives none: a returning turn is its session's, "
                                           "evicted by its pause")
        return cls(p, sources)

    def given(self, changes: Mapping[str, str]) -> WorkloadOrigin:
        return WorkloadOrigin(self.preset, {**self.sources, **changes}, self.file, self.notes)

    def with_file(self, path: str, changes: Mapping[str, str]) -> WorkloadOrigin:
        return WorkloadOrigin(self.preset, {**self.sources, **changes}, path, self.notes)

    def noting(self, *notes: str) -> WorkloadOrigin:
        return WorkloadOrigin(self.preset, self.sources, self.file, (*self.notes, *notes))

    def layer(self, name: str) -> str:
        """'preset', 'file' or 'flag': which layer gave the field."""
        text = self.sources.get(name, "")
        return "flag" if text.startswith("flag ") else "file" if text.startswith("file ") else "preset"

    def overridden(self) -> list[str]:
        """The fields a file or a flag gave, in order."""
        return [f for f in ORIGIN_FIELDS if self.layer(f) != "preset"]

    def to_dict(self) -> dict:
        return {"preset": self.preset.name, "preset_description": self.preset.description, "file": self.file,
                "sources": dict(self.sources), "notes": list(self.notes)}


# --------------------------------------------------------------------------------------------
# a workload file over a preset
# --------------------------------------------------------------------------------------------

def file_preset(data: Any) -> str | None:
    """The preset a workload file names (None when it names none)."""
    if isinstance(data, dict) and data.get("preset") is not None:
        if not isinstance(data["preset"], str):
            raise BadInput(f"workload file: preset must be a preset name, got {data['preset']!r}")
        return data["preset"]
    return None


def _check_file(data: Any) -> None:
    if not isinstance(data, dict):
        raise BadInput("workload file must hold a table/object at the top level")
    version = data.get(FORMAT_KEY, FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise BadInput(f"workload file: {FORMAT_KEY} = {version!r} is not a version this servesize reads (1)")
    allowed = set(SCALAR_FIELDS) | {"user", "subagent", FORMAT_KEY, "fit", "preset", "think_time_median_s"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise BadInput(f"workload file: unknown field(s): {', '.join(clip(u) for u in unknown)} (allowed: {', '.join(sorted(allowed))})")


def _class_over(data: Any, where: str, base) -> Any:
    """A class table from the file over the base class: the file's distribution, its prefix or the base's."""
    prefix = base.prefix_tokens if base is not None else 0
    return class_from_dict(data, where, prefix_tokens=prefix)


def _fitted_how(data: dict) -> Mapping[str, str]:
    fit = data.get("fit")
    fitted = fit.get("fitted") if isinstance(fit, dict) else None
    return fitted if isinstance(fitted, dict) else {}


def workload_from_data(data: Any, base: Workload, origin: WorkloadOrigin, path: str) -> tuple[Workload, WorkloadOrigin]:
    """A workload file's fields over ``base`` (the preset's workload); absent fields stay the preset's."""
    _check_file(data)
    how = _fitted_how(data)
    name = path.rsplit("/", 1)[-1]

    def said(field_name: str) -> str:
        detail = how.get(field_name)
        return f"file {name}: {detail}" if detail else f"file {name}"

    changes: dict[str, Any] = {}
    said_by: dict[str, str] = {}
    if "user" in data:
        user = _class_over(data["user"], "user", base.user)
        changes["user"] = user
        said_by.update({"user_median_tokens": said("user_median_tokens"), "user_sigma": said("user_sigma")})
        if isinstance(data["user"], dict) and "prefix_tokens" in data["user"]:
            said_by["user_prefix_tokens"] = said("user_prefix_tokens")
    if "subagent" in data:
        sub = data["subagent"]
        changes["subagent"] = None if sub in (None, {}) else _class_over(sub, "subagent", base.subagent)
        said_by["subagent"] = said("subagent")
    for key in SCALAR_FIELDS:
        if key in data:
            changes[key] = data[key]
            said_by[key] = said(key)
    think = think_mean_from(data)
    if think is not None:  # a file that states the median pause (and its shape), not the mean
        changes["think_time_s"] = think
        said_by["think_time_s"] = said("think_time_median_s")
    try:
        workload = base.replace(**changes)
    except BadInput as exc:
        raise BadInput(f"workload file {path}: {exc}") from None
    return workload, origin.with_file(path, said_by)
