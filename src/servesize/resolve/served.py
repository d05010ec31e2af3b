"""A pasted ``vllm serve`` line -> the Scenario fields it sets (flags given to servesize win), and the flags
it carries that change no figure (``served``, ``with_serve_line``)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from servesize.engine.versions import V1_FROM, parse_version
from servesize.engine.vocabulary import (
    accepts,
    canonical_flag,
    flag_effects,
    known_flag,
    show_version,
    takes_value,
    vocabulary,
)
from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.limits import parse_json
from servesize.scenario import PARAMS, Param, Scenario, params_in
from servesize.units import GiB

# Scenario engine fields that are servesize's own (no `vllm serve` flag sets them).
SERVESIZE_ONLY = ("vllm_serve", "vllm_version", "budget", "num_speculative_tokens", "cpu_avx512_bf16", "cpu_amx")


@frozen
class ServeLine:
    """What a `vllm serve ...` line says, in Scenario terms."""

    model: str | None
    fields: dict[str, Any]  # Scenario field -> the value the line gives (parsed as vLLM reads it)
    not_affecting: tuple[str, ...]  # flags vLLM knows that change no figure servesize computes
    estimated: tuple[str, ...]  # flags that move a term servesize estimates anyway (the reserve)
    not_modelled: tuple[str, ...] = ()  # KV connectors: where KV lives outside the pool servesize sizes, said plainly


def _vllm_params(version: tuple[int, int, int]) -> dict[str, Param]:
    """Every spelling a `vllm serve` line may use for a Scenario engine field, in this release."""
    out: dict[str, Param] = {}
    for p in params_in("engine"):
        if p.name in SERVESIZE_ONLY:
            continue
        for flag in (p.flag, *p.flags):
            if known_flag(flag, version):
                out[flag] = p
    return out


def _serve_tokens(text: str) -> list[str]:
    try:
        words = shlex.split(text.replace("\\\n", " "))
    except ValueError as exc:  # an unclosed quote
        raise BadInput(f"--vllm-serve: {exc}", field="vllm_serve") from None
    if words[:2] == ["vllm", "serve"]:
        return words[2:]
    if words[:1] == ["serve"]:
        return words[1:]
    for i in range(len(words) - 1):  # python -m vllm.entrypoints.openai.api_server ...
        if words[i] == "-m" and words[i + 1].startswith("vllm.entrypoints"):
            return words[i + 2:]
    raise BadInput("--vllm-serve takes a `vllm serve MODEL [flags]` line (or `python -m vllm.entrypoints.openai.api_server "
                   "[flags]`)", field="vllm_serve")


def served(text: str, version: tuple[int, int, int]) -> ServeLine:
    """Read a `vllm serve` line with the vocabulary of ``version``: each flag is modelled (a Scenario
    field), changes no figure (listed), moves an estimated term (listed), changes memory in a way
    servesize does not model (refused, with why), or is not a flag of that release (refused)."""
    words = _serve_tokens(text)
    params = _vllm_params(version)
    effects = flag_effects()
    model: str | None = None
    fields: dict[str, Any] = {}
    plain: list[str] = []
    estimated: list[str] = []
    connectors = _Connectors(effects.get("connector", {}))
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-"):
            if model is not None:
                raise BadInput(f"--vllm-serve: a second model {word!r} (the line already serves {model!r})", field="vllm_serve")
            model = word
            continue
        if not known_flag(word, version):
            raise BadInput(f"--vllm-serve: {word.split('=', 1)[0]} is not a flag of vllm serve {show_version(version)}", field="vllm_serve")
        flag = canonical_flag(word)
        value: str | None = word.split("=", 1)[1] if "=" in word else None
        if value is None and takes_value(word, version):
            if i >= len(words):
                raise BadInput(f"--vllm-serve: {flag} needs a value", field="vllm_serve")
            value, i = words[i], i + 1
        if flag == "--model":
            model = value
            continue
        if flag in connectors.rows:
            connectors.given[flag] = value
            continue
        _read_serve_flag(flag, value, params, effects, version, fields, plain, estimated)
    fields.update(connectors.modelled())
    return ServeLine(model, fields, (*plain, *connectors.plain()), tuple(estimated), connectors.warnings())


@dataclass
class _Connectors:
    """The KV-connector flags of a line (data/vllm_flag_effects.toml [connector]), read together: vLLM's native
    CPU offloading given a size is host RAM for KV offload per engine (the Scenario's cpu_offload_gib); any
    other connector is named in a warning saying that servesize does not model its pool."""

    rows: dict[str, dict]
    given: dict[str, str | None] = field(default_factory=dict)

    def _transfer(self) -> dict:
        text = self.given.get("--kv-transfer-config") or ""
        if not text.lstrip().startswith(("{", "[")):  # a dotted --kv-transfer-config.KEY=VALUE: the connector unnamed
            return {}
        try:
            doc = parse_json(text, "--vllm-serve: --kv-transfer-config")  # bad or too deep JSON: vLLM refuses it too
        except BadInput as exc:
            raise BadInput(str(exc), field="vllm_serve") from None
        return doc if isinstance(doc, dict) else {}

    def _sized_offload_gib(self) -> float | None:
        """--kv-offloading-size with the native backend (the default from v0.14; v0.12-0.13 require it named)."""
        size = self.given.get("--kv-offloading-size")
        if size is None or (self.given.get("--kv-offloading-backend") or "native") != "native":
            return None
        return float(PARAMS["cpu_offload_gib"].parse(size))

    def _transfer_offload_gib(self) -> float | None:
        """An OffloadingConnector given cpu_bytes_to_use in --kv-transfer-config."""
        doc = self._transfer()
        extra = doc.get("kv_connector_extra_config")
        cpu_bytes = extra.get("cpu_bytes_to_use") if isinstance(extra, dict) else None
        if doc.get("kv_connector") != self.rows["--kv-transfer-config"]["modelled"] or isinstance(cpu_bytes, bool) \
                or not isinstance(cpu_bytes, (int, float)):
            return None
        return float(PARAMS["cpu_offload_gib"].parse(str(cpu_bytes / GiB)))

    def modelled(self) -> dict[str, float | str]:
        """The host RAM of vLLM's native CPU offloading, GiB per engine (a size flag wins, as in vLLM's post-init),
        and the connector --kv-transfer-config names (the one a disaggregated layout's instances use)."""
        out: dict[str, float | str] = {}
        gib = self._sized_offload_gib()
        gib = self._transfer_offload_gib() if gib is None else gib
        if gib is not None:
            out["cpu_offload_gib"] = gib
        name = self._transfer().get("kv_connector")
        if isinstance(name, str) and name:
            out["kv_connector"] = name
        return out

    def plain(self) -> tuple[str, ...]:
        """--kv-offloading-backend without a size: offloading stays off, so it changes no figure."""
        backend = self.given.get("--kv-offloading-backend")
        alone = backend is not None and self.given.get("--kv-offloading-size") is None
        return (f"--kv-offloading-backend {backend}",) if alone else ()

    def warnings(self) -> tuple[str, ...]:
        """One plain line per connector servesize does not model."""
        why = self.rows["--kv-transfer-config"]["why"]
        out = []
        if self.given.get("--kv-offloading-size") is not None and self._sized_offload_gib() is None:
            backend = str(self.given.get("--kv-offloading-backend"))[:40]
            out.append(f"--kv-offloading-backend {backend}: a KV connector (LMCacheConnectorV1 for 'lmcache') {why}")
        if "--kv-transfer-config" in self.given and self._transfer_offload_gib() is None:
            name = self._transfer().get("kv_connector")
            named = f"KV connector {name[:60]}" if isinstance(name, str) and name else "a KV connector"
            out.append(f"--kv-transfer-config: {named} {why}")
        return tuple(out)


# Scenario fields whose `vllm serve` value is one of a release's choices (engine.vocabulary): a line is read as
# vLLM's parser reads it, so servesize's own names (int4, bf16, native) are refused there.
SERVE_VOCABULARY = {"quantization": "quantization", "kv_cache_dtype": "kv_cache_dtype"}


def _read_serve_flag(flag: str, value: str | None, params: dict[str, Param], effects: dict, version: tuple[int, int, int],
                     fields: dict[str, Any], plain: list[str], estimated: list[str]) -> None:
    negated = flag.startswith("--no-") and "--" + flag[5:] in params
    param = params.get("--" + flag[5:] if negated else flag)
    if param is not None:
        kind = SERVE_VOCABULARY.get(param.name)
        if kind is not None and value is not None and not accepts(kind, value.strip(), version):
            raise BadInput(f"--vllm-serve: {flag} {value!r} is not a value vllm serve {show_version(version)} accepts "
                           f"({', '.join(vocabulary(kind, version))})", field="vllm_serve")
        if param.kind == "bool":
            fields[param.name] = (not negated) if value is None else param.parse(value)
        else:
            fields[param.name] = param.parse(value)
        return
    refused = effects.get("refuse", {}).get(flag)
    if refused is not None and not (refused.get("v0_only") and version >= V1_FROM):
        raise BadInput(f"--vllm-serve: {flag} {refused['why']}; servesize does not model that (drop the flag to size "
                       "without it)", field="vllm_serve")
    if flag in effects.get("estimate", {}):
        estimated.append(f"{flag}: {effects['estimate'][flag]['why']}")
        return
    plain.append(flag if value is None else f"{flag} {value}")


def with_serve_line(scenario: Scenario) -> tuple[Scenario, ServeLine | None]:
    """The Scenario with the fields a pasted `vllm serve` line sets; a field given to servesize
    itself (a value other than its declared default) wins over the line's."""
    if scenario.vllm_serve is None:
        return scenario, None
    line = served(scenario.vllm_serve, parse_version(scenario.vllm_version))
    given = scenario.explicit()
    changes = {name: value for name, value in line.fields.items() if name not in given}
    if scenario.model is None:
        if line.model is None:
            raise BadInput("--vllm-serve names no model, and no MODEL was given", field="vllm_serve")
        changes["model"] = line.model
    return scenario.replace(**changes), line

