"""A Scenario: one question put to servesize, declared once.

    import servesize as s
    sc = s.Scenario(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8")
    s.plan(sc).ceilings        # {'cache': ..., 'decode': ..., 'latency': ..., 'saturation': ...}

Every field is declared here once, with its type (``kind``), bounds, help text and group; the
command line's flags (``servesize.flags``), the docs' flag table (docs/flags.md) and, next, the
explorer's form are generated from this declaration, so a flag cannot drift from its bound.

Groups, in the order a reader meets them:

- model and GPUs: what is served, on what;
- engine: vLLM's own flags, with vLLM's names and value vocabulary;
- workload: what the users do (a workload file, then single-field overrides);
- knobs: the modelled assumptions (None = the named assumption's value, data/assumptions.toml);
- calibration: a measured pool, or a calibration file from ``servesize calibrate``;
- Monte-Carlo: fills, draws and the seed.

Declared once: a field's Param (``_p``: kind, bounds, help, default, where it goes) is its one declaration.
The workload, knobs and Monte-Carlo groups are dataclasses (``WorkloadFields``, ``KnobFields``,
``MonteCarloFields``) that Scenario and FleetQuery inherit whole; FitQuery and FleetQuery reference the
engine flags they share with ``_shared(name)`` (the Scenario's Param object and default, never a copy).
The engine's own dataclasses (``engine.deployment.Deployment``) hold the same names as slots the resolved
value fills, without a bound or a default of their own; tests/test_declared_once.py checks all of it.

A field left at None takes its default where it is used (the engine's default for the vLLM
version and GPU, the workload's value, the assumption's value), so "not given" stays
distinguishable from "given the default"; the rules that fill them live in ``servesize.resolve`` (one module per concern).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import MISSING, field, fields, replace
from typing import TYPE_CHECKING, Any

from servesize.assumptions import assumption
from servesize.engine.deployment import AUTO_MAX_MODEL_LEN, MOE_BACKENDS, batch_default_words
from servesize.engine.placement import DEFAULT_MIN_CONCURRENCY
from servesize.engine.quant_methods import check_vocabulary
from servesize.engine.versions import DEFAULT_VLLM_VERSION, parse_version
from servesize.engine.vocabulary import check_release
from servesize.errors import BadInput, OutOfRange, UnreadableNumber, clip
from servesize.frozen import frozen
from servesize.limits import DEFAULT_DRAWS, DEFAULT_FILLS, DEFAULT_SEED, MAX_DRAWS, MAX_FILLS, MAX_HOST_MEMORY_GIB, parse_json
from servesize.model.catalogue import InlineConfig
from servesize.model.hardware import load_kv_links
from servesize.units import parse_bytes, parse_tokens, parse_vllm_int
from servesize.workload import catalogue as workload_catalogue
from servesize.workload.catalogue import preset_names, preset_table

if TYPE_CHECKING:  # a Calibration is read only where one is given: the scenario's import does without the log parser
    from servesize.vllm_logs.calibration import Calibration
    from servesize.workload.model import Workload

KINDS = ("model", "tokens", "bytes", "int", "float", "choice", "bool", "text", "version", "workload", "calibration",
         "list", "vllm_int", "vllm_len", "vllm_bytes", "json")

GROUPS = {
    "model": "model and GPUs",
    "engine": "vLLM engine flags (same names and meanings as vllm serve)",
    "workload": "workload (a preset, then a workload file, then these fields; default preset: coding-agent, the "
                "warm-capacity seed's reference workload)",
    "knobs": "modelled assumptions (default: data/assumptions.toml; see --explain)",
    "calibration": "measured pool and calibration",
    "monte_carlo": "Monte-Carlo",
    "fit": "what fits",
    "fleet": "the fleet: what to search and how to price it",  # fleet: servesize fleet (FleetQuery)
    "disagg": "disaggregated prefill and decode (separate vllm serve instances joined by a KV connector)",
}

_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


@frozen
class SensitivityRow:
    """One row of the sensitivity panel (planning.sensitivity), declared on the field it varies (``Param.sensitivity``)
    and handed to the planner by the api (``SENSITIVITY_ROWS``): the planner holds no table of its own.

    name       the row's name in every output (``spec_speedup``, ``user_median_tokens``, ...)
    kind       'knob' edits Knobs; 'pacing' edits the Workload but not the sessions it samples (the warm fill and
               decode stay the plan's); 'workload' edits the sessions themselves; 'engine' edits the deployment's
               scheduler (--max-num-batched-tokens: the chunk a decode waits for), its pool held as planned (a
               larger chunk also reserves more activation memory: servesize memory says how much)
    lo, hi     the range searched for a flip of the binding ceiling
    unit       how its values print ('tokens', 's', 'x', 'fraction', '')
    field      the planner's name for it: ``apply_param``'s, or the Fixed field an 'engine' row edits (the
               declaring Param's target when left empty)
    geometric  searched on a log scale (a length or a time that spans decades)
    """

    name: str
    kind: str
    lo: float
    hi: float
    unit: str = ""
    field: str = ""
    geometric: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ("knob", "pacing", "workload", "engine"):
            raise ValueError(f"sensitivity row {self.name}: kind {self.kind!r}")
        if not self.lo < self.hi:
            raise ValueError(f"sensitivity row {self.name}: an empty range [{self.lo}, {self.hi}]")

    def as_tuple(self) -> tuple[str, str, float, float, str]:
        """(kind, field, lo, hi, unit): the panel's table as the page reads it."""
        return self.kind, self.field, self.lo, self.hi, self.unit


@frozen
class Slider:
    """The explorer's slider over a field, a view of it and not its bound (the text box beside it takes any value
    the declaration allows). step: 0 is continuous. scale: 'linear' or 'log'; None takes the field's sensitivity
    row's (log where that row searches on a log scale). span: where neither the field's sensitivity row nor its
    assumption's low/high bracket in data/assumptions.toml gives the range, the span the page offers."""

    step: float = 0.0
    scale: str | None = None
    span: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.scale not in (None, "linear", "log") or self.step < 0:
            raise ValueError(f"a slider of scale {self.scale!r}, step {self.step!r}")
        if self.span is not None and not self.span[0] < self.span[1]:
            raise ValueError(f"a slider over an empty span {self.span!r}")


@frozen
class Param:
    """How one Scenario field is typed, bounded and explained.

    kind        tokens ('31k', servesize's decimal reading), bytes ('80GiB'), int, float, choice, bool, text,
                version, workload (a Workload or a workload file), calibration (a Calibration or its file);
                vllm_int / vllm_len / vllm_bytes: one of vLLM's own numeric flags, read by vLLM's rule
                (k = 1000, K = 1024; vllm_len also takes auto / -1); json: a JSON object (text or a dict).
    lo, hi      inclusive bounds (``lo_open``: lo itself is refused).
    bound_why   why the bound is where it is, when physics and not the type sets it (said when it refuses).
    flags       extra command-line spellings (the first flag is always --name-with-dashes).
    assumption  the data/assumptions.toml entry whose value a None takes (knobs).
    seed_value  the default preset's value (coding-agent, the seed's reference workload) a None takes
                unless a preset or workload file says otherwise (workload fields).
    sweep       may be varied by ``servesize.sweep`` (it does not change the memory).
    to          where it goes, when the planner names it otherwise: the Knobs field, or the name
                ``planning.sensitivity.apply_param`` takes (``target``: this, else the field's name).
    origin      the key a WorkloadOrigin records its provenance under, when it differs from ``target``
                (``origin_key``); the name tables of ``servesize.resolve`` are generated from these.
    sensitivity the sensitivity panel's row over this field (``SENSITIVITY_ROWS`` is generated from these).
    slider      the explorer's slider over it (web/form.py reads it), or None: no slider.
    """

    kind: str
    help: str
    group: str
    name: str = ""
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    choices: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    metavar: str | None = None
    unit: str = ""
    assumption: str | None = None
    seed_value: Any = None
    sweep: bool = False
    bound_why: str = ""
    to: str = ""
    origin: str = ""
    sensitivity: SensitivityRow | None = None
    slider: Slider | None = None

    @property
    def target(self) -> str:
        return self.to or self.name

    @property
    def origin_key(self) -> str:
        return self.origin or self.target

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def describe_default(self) -> str:
        """The default a None takes, generated from the data it comes from."""
        if self.assumption is not None:
            default, seed = assumption(self.assumption), assumption(self.assumption, "seed")
            return f"default {default:g}" + (f"; the seed's {seed:g}" if seed != default else "")
        if self.seed_value is not None:
            shown = f"{self.seed_value:,}" if isinstance(self.seed_value, int) and not isinstance(self.seed_value, bool) \
                else f"{self.seed_value:g}" if isinstance(self.seed_value, float) else str(self.seed_value)
            return f"default: the preset's; coding-agent {shown}"
        return ""

    def full_help(self) -> str:
        default = self.describe_default()
        return f"{self.help} ({default})" if default else self.help

    # -- values ------------------------------------------------------------------------------
    def parse(self, value: Any) -> Any:
        """Text or a Python value -> the typed value, bounds checked; None passes through."""
        if value is None:
            return None
        try:
            typed: Any = _READERS[self.kind](self, value)
            if self.kind in ("tokens", "bytes", "int", "float", "vllm_int", "vllm_bytes") or (
                    self.kind == "vllm_len" and typed != AUTO_MAX_MODEL_LEN):
                self._check_bounds(typed)
        except BadInput as exc:
            exc.field = exc.field or self.name  # the refusal is about this field (the explorer marks its control)
            raise
        return typed

    def _check_bounds(self, v: float) -> None:
        lo_bad = self.lo is not None and (v <= self.lo if self.lo_open else v < self.lo)
        hi_bad = self.hi is not None and v > self.hi
        if lo_bad or hi_bad:
            why = f" ({self.bound_why})" if self.bound_why else ""
            raise OutOfRange(f"{self.flag} {_show(v)} is out of range: {self.range_text()}{why}")

    def range_text(self) -> str:
        if self.lo is not None and self.hi is not None:
            return f"{'(' if self.lo_open else '['}{_show(self.lo)}, {_show(self.hi)}]"
        if self.lo is not None:
            return f"{'>' if self.lo_open else '>='} {_show(self.lo)}"
        return f"<= {_show(self.hi)}" if self.hi is not None else ""

    def _refuse(self, value: Any, what: str) -> BadInput:
        return BadInput(f"{self.flag} {clip(value)} is not {what}")


def _show(v: float) -> str:
    if isinstance(v, float) and not v.is_integer():
        return f"{v:g}"
    if abs(v) >= 10**30:  # a 300-digit whole number: its magnitude, not its digits
        return f"{float(v):.3g}" if abs(v) < 1e308 else f"a number of {len(str(abs(int(v)))):,} digits"
    return f"{int(v):,}" if abs(v) >= 10_000 else f"{int(v)}"


def _read_tokens(p: Param, value: Any) -> int:
    if isinstance(value, bool):
        raise p._refuse(value, "a token count")
    return _read_number(p, value, parse_tokens, "a token count", "e.g. 32768, 32k = 32,000, 32K = 32,768, 2.77m")


def _read_number(p: Param, value: Any, parse: Callable[[Any], int], what: str, example: str) -> int:
    """``parse(value)``, or p's refusal naming ``what`` and the parser's reason (``example`` where it gives none)."""
    try:
        return parse(value)
    except UnreadableNumber as exc:
        raise p._refuse(value, f"{what} ({exc.reason})") from None
    except BadInput:
        raise p._refuse(value, f"{what} ({example})") from None


def _read_bytes(p: Param, value: Any) -> int:
    if isinstance(value, bool):
        raise p._refuse(value, "an amount of memory")
    try:
        return parse_bytes(value)
    except BadInput:
        raise p._refuse(value, "an amount of memory (e.g. 81559MiB, 80GiB, 141GB)") from None


def _read_int(p: Param, value: Any) -> int:
    if isinstance(value, bool):
        raise p._refuse(value, "a whole number")
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str) and ("_" in value or "," in value):
        raise p._refuse(value, "a whole number (write it without ',' or '_' between the digits)")
    if isinstance(value, str) and not value.isascii():  # int('٣') is 3 and float('１０') 10.0: ASCII digits only
        raise p._refuse(value, "a whole number in ASCII digits (0-9)")
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit() and len(value.strip()) <= 40:  # ASCII (above)
        return int(value.strip())  # exact, however large (a float would round 2**63 - 1)
    try:
        number = float(str(value).strip()) if not isinstance(value, float) else value
    except ValueError:
        raise p._refuse(value, "a whole number") from None
    if not math.isfinite(number) or number != int(number) or abs(number) > 2**63:
        raise p._refuse(value, "a whole number")
    return int(number)


def _read_float(p: Param, value: Any) -> float:
    if isinstance(value, bool):
        raise p._refuse(value, "a number")
    if isinstance(value, str) and ("_" in value or "," in value):  # float('1_0') is 10.0; '0,5' may mean 0.5
        raise p._refuse(value, "a number (write it without ',' or '_': 0.5, 1000)")
    if isinstance(value, str) and not value.isascii():
        raise p._refuse(value, "a number in ASCII digits (0-9)")
    try:
        number = float(value.strip()) if isinstance(value, str) else float(value)
    except (TypeError, ValueError, OverflowError):
        raise p._refuse(value, "a number") from None
    if not math.isfinite(number):
        raise p._refuse(value, "a finite number")
    return number


def _read_choice(p: Param, value: Any) -> str:
    text = str(value).strip()
    if text not in p.choices:
        raise BadInput(f"{p.flag} {clip(value)} is not one of {', '.join(p.choices)}")
    return text


def _read_bool(p: Param, value: Any) -> bool:
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise p._refuse(value, "true or false")


def _read_text(p: Param, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise p._refuse(value, "a non-empty string")
    return value.strip()


def _read_version(p: Param, value: Any) -> str:
    text = _read_text(p, str(value))
    check_release(parse_version(text), text)
    return text


def _read_vllm_int(p: Param, value: Any) -> int:
    return _read_number(p, value, parse_vllm_int, "a number as vLLM reads it", "32768, 32k = 32,000, 32K = 32,768")


def _read_vllm_len(p: Param, value: Any) -> int:
    if isinstance(value, str) and value.strip().lower() in ("auto", "-1"):
        return AUTO_MAX_MODEL_LEN
    if value == AUTO_MAX_MODEL_LEN and not isinstance(value, bool):
        return AUTO_MAX_MODEL_LEN
    return _read_vllm_int(p, value)


def _read_vllm_bytes(p: Param, value: Any) -> int:
    if isinstance(value, str) and value.strip()[-1:].lower() == "b":  # an explicit unit: 6.51GiB, 80GB, 512MiB
        return _read_bytes(p, value)
    return _read_vllm_int(p, value)


def _clipped(value: str) -> str:
    return clip(value, 80)


def _read_json(p: Param, value: Any) -> str:
    """A JSON object, kept as canonical text (sorted keys) so a Scenario stays hashable."""
    if isinstance(value, Mapping):
        return json.dumps(dict(value), sort_keys=True)
    if not isinstance(value, str) or not value.strip():
        raise p._refuse(value, "a JSON object")
    parsed = parse_json(value, f"{p.flag} {_clipped(value)}")
    if not isinstance(parsed, dict):
        raise BadInput(f"{p.flag}: expected a JSON object ({{...}}), got {_clipped(value)}")
    return json.dumps(parsed, sort_keys=True)


def _read_model(p: Param, value: Any) -> str | InlineConfig:
    if isinstance(value, InlineConfig):
        return value
    if isinstance(value, Mapping):
        return InlineConfig.of(value)  # a config.json's content
    return _read_text(p, value)


def _read_workload(p: Param, value: Any) -> Workload | str:
    from servesize.workload.model import Workload  # the workload's model loads where a workload is given or resolved

    if isinstance(value, Workload):
        return value
    return _read_text(p, value)  # a workload file, read when the scenario is resolved


def _read_list(p: Param, value: Any) -> tuple[str, ...]:
    """A repeatable flag's values: one string, or a list of them (a mapping reads as KEY=VALUE items)."""
    if isinstance(value, Mapping):
        value = [f"{k}={v}" for k, v in value.items()]
    items = (value,) if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items:
        raise p._refuse(value, "a value or a list of them")
    return tuple(_read_text(p, item) for item in items)


def _read_calibration(p: Param, value: Any) -> Calibration | str:
    from servesize.vllm_logs.calibration import Calibration

    if isinstance(value, Calibration):
        return value
    return _read_text(p, value)  # a calibration file, read when the scenario is resolved


_READERS = {"model": _read_model, "tokens": _read_tokens, "bytes": _read_bytes, "int": _read_int, "float": _read_float,
            "choice": _read_choice, "bool": _read_bool, "text": _read_text, "version": _read_version,
            "workload": _read_workload, "calibration": _read_calibration, "list": _read_list,
            "vllm_int": _read_vllm_int, "vllm_len": _read_vllm_len, "vllm_bytes": _read_vllm_bytes, "json": _read_json}

_KV_LINKS = tuple(load_kv_links())  # gpus.toml [[kv_link]] and [[host_link]]
MAX_TOKENS = 100_000_000  # longer than any context a model accepts (and the workload's own cap)


def _ttft_help() -> str:
    """--ttft-limit's words, read from the load models' data (data/load_models.toml, what planning.load_models
    builds them from): the default's rule and the seed's, so that the flag never describes a rule the plan does not
    apply. Read as data: the planner itself is not loaded to build a parser."""
    from servesize.datafiles import table

    models = table("load_models.toml")
    now, seed = models[str(assumption("load.model"))], models[str(assumption("load.model", "seed"))]
    return (f"the time-to-first-token budget: the latency ceiling is the {now['means']['latency']} (--assumptions "
            f"seed, {seed['title']}: the {seed['means']['latency']})")


_TTFT_HELP = _ttft_help()


def _p(kind: str, help: str, group: str, *, default: Any = None, **extra: Any) -> Any:
    if default is MISSING:  # required: keyword-only, so it may follow the shared groups' defaulted fields
        return field(kw_only=True, metadata={"param": Param(kind, help, group, **extra)})
    return field(default=default, metadata={"param": Param(kind, help, group, **extra)})


_SEED = workload_catalogue  # the seed reference workload's constants, for the generated help

# Lower bounds no physics violates, so that a value inside a declared range gives a finite figure (1e-300 passed
# an open bound at 0 and divided by zero, or overflowed, downstream).
_EFFICIENCY_FLOOR = 0.01
_EFFICIENCY_WHY = "below 1% no engine runs a GPU; a smaller fraction only divides the figures toward infinity"
_THINK_FLOOR_S = workload_catalogue.MIN_THINK_TIME_S
_THINK_WHY = "a user who waits under 10 ms between requests is a load generator, not a user"


# -- the groups a query shares (declared once; Scenario and FleetQuery take them whole) -----------------

def _parse_own(obj: Any, params: Mapping[str, Param]) -> None:
    for name, param in params.items():
        object.__setattr__(obj, name, param.parse(getattr(obj, name)))


@frozen
class WorkloadFields:
    """What the users do: a preset, a workload file, then single-field overrides (the workload group).

    ``servesize.resolve.workload`` takes this type: a Scenario and a FleetQuery are WorkloadFields, and a team's
    or a measurement's workload is one built from its own flags."""

    preset: str | None = _p("choice", "workload preset (data/workloads.toml, each field sourced): "
                            + "; ".join(f"{name}: {p['description']}" for name, p in preset_table().items()),
                            "workload", choices=preset_names(), metavar="NAME")
    workload: Workload | str | None = _p("workload", "a workload file (servesize workload fit) or Workload: its fields "
                                         "replace the preset's; the fields below replace both", "workload",
                                         metavar="FILE")
    median: int | None = _p("tokens", "user session median prompt length", "workload", lo=1, hi=MAX_TOKENS, unit="tokens",
                            seed_value=_SEED.SEED_USER_MEDIAN_TOKENS, sweep=True, metavar="TOKENS", origin="user_median_tokens",
                            sensitivity=SensitivityRow("user_median_tokens", "workload", 5_000.0, 250_000.0, "tokens",
                                                       geometric=True),
                            slider=Slider())
    sigma: float | None = _p("float", "user log-normal sigma", "workload", lo=0.0, hi=5.0, lo_open=True,
                             seed_value=_SEED.SEED_USER_SIGMA, sweep=True, metavar="S", origin="user_sigma",
                             sensitivity=SensitivityRow("user_sigma", "workload", 0.2, 1.6), slider=Slider(0.01))
    prefix: int | None = _p("tokens", "user shared prefix (system prompt + tools)", "workload", lo=0, hi=MAX_TOKENS,
                            unit="tokens", seed_value=_SEED.SEED_USER_PREFIX_TOKENS, sweep=True, metavar="TOKENS",
                            origin="user_prefix_tokens", slider=Slider(500, "linear", (0, 64_000)))
    subagent_ratio: float | None = _p("float", "subagent requests per user request (0 = none)", "workload", lo=0.0,
                                      hi=100.0, seed_value=_SEED.SEED_SUBAGENT_RATIO, sweep=True, metavar="R",
                                      slider=Slider(0.05, "linear", (0, 1)))
    subagent_median: int | None = _p("tokens", "subagent median prompt length", "workload", lo=1, hi=MAX_TOKENS,
                                     unit="tokens", seed_value=_SEED.SEED_SUBAGENT_MEDIAN_TOKENS, sweep=True,
                                     metavar="TOKENS", origin="subagent", slider=Slider(0, "log", (500, 120_000)))
    subagent_sigma: float | None = _p("float", "subagent log-normal sigma", "workload", lo=0.0, hi=5.0, lo_open=True,
                                      seed_value=_SEED.SEED_SUBAGENT_SIGMA, sweep=True, metavar="S", origin="subagent",
                                      slider=Slider(0.01, "linear", (0.2, 1.6)))
    subagent_prefix: int | None = _p("tokens", "subagent shared prefix", "workload", lo=0, hi=MAX_TOKENS, unit="tokens",
                                     seed_value=_SEED.SEED_SUBAGENT_PREFIX_TOKENS, sweep=True, metavar="TOKENS", origin="subagent")
    subagents_share_prefix: bool | None = _p("bool", "subagents start with the user prefix", "workload",
                                             seed_value=False)
    invalidation: float | None = _p("float", "fraction of requests that match no cached prefix (also the miss rate)",
                                    "workload", lo=0.0, hi=1.0, seed_value=_SEED.SEED_INVALIDATION, sweep=True,
                                    metavar="F", sensitivity=SensitivityRow("invalidation", "workload", 0.0, 0.5,
                                                                            "fraction"),
                                    slider=Slider(0.005))
    think_time: float | None = _p("float", "seconds between one user's requests", "workload", lo=_THINK_FLOOR_S,
                                  hi=1e6, unit="s", seed_value=_SEED.SEED_THINK_TIME_S, sweep=True,
                                  metavar="SECONDS", bound_why=_THINK_WHY, to="think_time_s",
                                  sensitivity=SensitivityRow("think_time_s", "pacing", 3.0, 180.0, "s", geometric=True),
                                  slider=Slider(1))
    output_tokens: int | None = _p("tokens", "output tokens per request", "workload", lo=1, hi=10_000_000,
                                   unit="tokens", seed_value=_SEED.SEED_OUTPUT_TOKENS, sweep=True, metavar="TOKENS")
    warm_turn_tokens: int | None = _p("tokens", "a warm turn's new tokens (the plan prefills these, the part of the "
                                      "last block a hit cannot end inside, and a block MTP drafts make vLLM drop)",
                                      "workload", lo=1,
                                      hi=MAX_TOKENS, unit="tokens", seed_value=_SEED.SEED_WARM_TURN_TOKENS, sweep=True,
                                      flags=("--turn-tokens",), metavar="TOKENS",
                                      slider=Slider(250, "linear", (250, 16_000)))


    def __post_init__(self) -> None:
        _parse_own(self, _own_params(WorkloadFields))


@frozen
class KnobFields:
    """The modelled assumptions (the knobs group): None = the named assumption's value."""

    bandwidth_efficiency: float | None = _p("float", "achieved / datasheet HBM bandwidth", "knobs", lo=_EFFICIENCY_FLOOR,
                                            hi=1.0, assumption="decode.bandwidth_efficiency", sweep=True,
                                            metavar="F", bound_why=_EFFICIENCY_WHY,
                                            sensitivity=SensitivityRow("bandwidth_efficiency", "knob", 0.3, 1.0,
                                                                       "fraction"),
                                            slider=Slider(0.01))
    tp_efficiency: float | None = _p("float", "bandwidth/FLOP efficiency of the TP group (default 0.90 per doubling)",
                                     "knobs", lo=_EFFICIENCY_FLOOR, hi=1.0, sweep=True, metavar="F",
                                     bound_why=_EFFICIENCY_WHY)
    mtp_speedup: float | None = _p("float", "tokens per step with MTP speculation (1.0 = off)", "knobs", lo=1.0,
                                   hi=17.0, assumption="decode.mtp_speedup", sweep=True, metavar="X",
                                   sensitivity=SensitivityRow("spec_speedup", "knob", 1.0, 3.0, "x"), slider=Slider(0.05))
    spec_acceptance: float | None = _p("float", "per-draft MTP acceptance (speedup 1 + a + ... + a^k)", "knobs",
                                       lo=0.0, hi=1.0, assumption="decode.mtp_acceptance", sweep=True, metavar="A",
                                       slider=Slider())
    decode_floor: float | None = _p("float", "per-user p50 decode floor", "knobs", lo=0.0, hi=100_000.0, lo_open=True,
                                    unit="tok/s", assumption="decode.floor_hard_tok_s", sweep=True, metavar="TOK_S")
    comfortable_floor: float | None = _p("float", "comfortable decode speed", "knobs", lo=0.0, hi=100_000.0,
                                         lo_open=True, unit="tok/s", assumption="decode.floor_comfortable_tok_s",
                                         sweep=True, metavar="TOK_S")
    mfu: float | None = _p("float", "prefill model FLOP utilisation", "knobs", lo=_EFFICIENCY_FLOOR,
                           hi=1.0, assumption="prefill.mfu", sweep=True, metavar="F", bound_why=_EFFICIENCY_WHY,
                           sensitivity=SensitivityRow("mfu", "knob", 0.15, 0.9, "fraction"), slider=Slider(0.01))
    decode_compute_efficiency: float | None = _p(
        "float", "achieved / peak FLOP/s of a compute-bound decode step (the roofline's compute leg)", "knobs",
        lo=_EFFICIENCY_FLOOR, hi=1.0, assumption="decode.compute_efficiency", sweep=True, metavar="F",
        bound_why=_EFFICIENCY_WHY, to="compute_efficiency", slider=Slider())
    ttft_limit: float | None = _p("float", _TTFT_HELP, "knobs", lo=0.0, hi=100_000.0, lo_open=True,
                                  unit="s", assumption="latency.ttft_limit_s", sweep=True, metavar="SECONDS", to="ttft_limit_s",
                                  sensitivity=SensitivityRow("ttft_limit_s", "knob", 1.0, 60.0, "s"), slider=Slider(0.5))
    electricity_price: float | None = _p("float", "electricity price per kWh, in --currency", "knobs", lo=0.0,
                                        hi=100.0, unit="per kWh", assumption="power.price_per_kwh",
                                        flags=("--price-per-kwh",), metavar="PRICE", to="price_per_kwh",
                                        slider=Slider(0.01))
    currency: str | None = _p("text", "currency of --electricity-price and every cost printed (default EUR: the "
                              "default price is the EU average in euros)", "knobs", metavar="CODE")
    pue: float | None = _p("float", "power usage effectiveness: facility W per IT W", "knobs", lo=1.0, hi=5.0,
                           assumption="power.pue", metavar="PUE", slider=Slider(0.05))
    # at most MAX_HOST_MEMORY_GIB: one engine's host is one machine, and no machine sold holds more
    cpu_offload_gib: float | None = _p("float", "host RAM for KV offload per engine (GiB)", "knobs", lo=0.0,
                                       hi=MAX_HOST_MEMORY_GIB, unit="GiB", sweep=True, metavar="GIB",
                                       to="cpu_offload_bytes", slider=Slider(32, "linear", (0, 1024)))
    sticky_routing: bool = _p("bool", "DP replicas behind a session-sticky router (--no-sticky-routing: a cache-blind "
                              "balancer)", "knobs", default=True)
    assumptions: str = _p("choice", "seed: the warm-capacity seed's values (bandwidth efficiency 1.0, MTP 1.7, ...)",
                          "knobs", default="default", choices=("default", "seed"))



@frozen
class MonteCarloFields:
    """The Monte-Carlo group: fills, draws and the seed."""

    fills: int = _p("int", "Monte-Carlo fills of the pool", "monte_carlo", default=DEFAULT_FILLS, lo=1, hi=MAX_FILLS, metavar="N")
    draws: int = _p("int", "sessions drawn per fill (grown when a fill needs more)", "monte_carlo", default=DEFAULT_DRAWS, lo=1,
                    hi=MAX_DRAWS, metavar="N")
    seed: int = _p("int", "RNG seed: the same inputs give the same output", "monte_carlo", default=DEFAULT_SEED, lo=0,
                   hi=2**63 - 1, metavar="N")



@frozen
class Scenario(WorkloadFields, KnobFields, MonteCarloFields):
    """A model on GPUs with vLLM's flags, a workload, the modelled knobs and any calibration.

    The workload, knobs and Monte-Carlo fields are the shared groups' (``WorkloadFields``, ``KnobFields``,
    ``MonteCarloFields``); the fields below are the Scenario's own."""

    # -- model and GPUs -------------------------------------------------------------------
    model: str | InlineConfig = _p("model", "catalogue name (servesize models), Hugging Face id, or path to a config.json / "
                                   "model folder (the library also takes a config.json's content as a dict); may be "
                                   "left out when --vllm-serve names it", "model", default=None, metavar="MODEL")
    gpus: str = _p("text", "N x GPU type, e.g. 1xH200, 4xH100 (servesize gpus lists them)", "model", default=None,
                   metavar="NxGPU")
    gpu_memory: int | None = _p("bytes", "override the GPU's memory as nvidia-smi reports it, e.g. 81559MiB", "model",
                                lo=1 << 20, hi=1 << 44, metavar="BYTES", unit="B")
    gpu_bandwidth: float | None = _p("float", "override (or supply) the GPU's peak memory bandwidth, GB/s", "model",
                                     lo=1.0, hi=1e6, unit="GB/s", metavar="GB_S",
                                     bound_why="no accelerator's memory moves under 1 GB/s")
    gpu_flops: float | None = _p("float", "override (or supply) the GPU's dense TFLOP/s at the compute dtype (bf16, or "
                                 "fp8 for fp8 weights)", "model", lo=0.01, hi=1e6, unit="TFLOP/s",
                                 metavar="TFLOPS", bound_why="no accelerator computes under 10 GFLOP/s")
    gpu_tdp: float | None = _p("float", "override (or supply) the GPU's board power, W", "model", lo=1.0, hi=1e5,
                               unit="W", metavar="WATTS", bound_why="no accelerator board draws under 1 W")
    # fleet: plan --users N sizes the data-parallel replicas (servesize.resolve.fleet.users_sizing)
    users: int | None = _p("int", "size the fleet for N users: how many GPUs of --gpus's type (replicas of "
                           "--tensor-parallel-size GPUs) keep every ceiling at N; the count in --gpus is replaced",
                           "model", lo=1, hi=10_000_000, metavar="N")

    # -- disaggregated prefill and decode (issue 32) ------------------------------------
    prefill_instances: int | None = _p("int", "prefill instances (xP): with --decode-instances, plan prefill and decode "
                                       "in separate vllm serve instances of --gpus's type, joined by a KV connector; "
                                       "the plan prints the aggregated layout on the same GPUs beside it", "disagg",
                                       lo=1, hi=1024, metavar="X")
    decode_instances: int | None = _p("int", "decode instances (yD), with --prefill-instances", "disagg", lo=1,
                                      hi=1024, metavar="Y")
    prefill_tp: int | None = _p("int", "GPUs per prefill instance (default: --tensor-parallel-size)", "disagg", lo=1,
                                hi=1024, metavar="N")
    decode_tp: int | None = _p("int", "GPUs per decode instance (default: --tensor-parallel-size)", "disagg", lo=1,
                               hi=1024, metavar="N")
    prefill_gpu: str | None = _p("text", "the prefill instances' GPU type where it differs from --gpus's (H100-SXM, "
                                 "L40S, ...): --gpus then holds the decode pool, the prefill pool runs on --prefill-instances "
                                 "x --prefill-tp of these, and the aggregated layout beside it is each type's GPUs "
                                 "served apart, behind one router", "disagg", metavar="GPU")
    kv_link: str | None = _p("choice", "the link a pull crosses from a prefill GPU to a decode GPU, per GPU (gpus.toml "
                             "[[kv_link]] and [[host_link]]; default: the GPU's NVLink where it has one and every "
                             "instance fits one 8-GPU node, else one 400 Gb/s NIC per GPU, ib-ndr)", "disagg",
                             choices=_KV_LINKS, metavar="LINK")
    kv_connector: str = _p("text", "the KV connector, as --kv-transfer-config's kv_connector names it (a pasted "
                           "--vllm-serve line's is read): servesize prices vLLM 0.32's NixlConnector (alias "
                           "NixlPullConnector: the decode instance pulls what it lacks)", "disagg",
                           default="NixlConnector", metavar="NAME")

    # -- vLLM engine flags ----------------------------------------------------------------
    vllm_serve: str | None = _p(
        "text", "a whole `vllm serve MODEL ...` line: its model and flags are read as vLLM reads them (every flag of "
        "--vllm-version is accepted; those that change no figure are listed; a flag vLLM does not know is refused); "
        "flags given to servesize win; any other `vllm serve` flag may also be given to servesize directly "
        "(--trust-remote-code, --port 8000) and is read the same way", "engine", flags=("--serve",), metavar="'vllm serve ...'")
    tensor_parallel_size: int = _p("int", "GPUs per replica (tensor parallel); left at 1 when --gpus names more GPUs "
                                   "than TP x DP x PP, servesize chooses it (plan's placement)", "engine", default=1,
                                   lo=1, hi=1024, flags=("-tp",), metavar="N")
    data_parallel_size: int = _p("int", "replicas (data parallel; with --enable-expert-parallel, DP attention: each rank "
                                 "its own KV pool, the experts split over all TP x DP ranks); left at 1, as many as "
                                 "--gpus holds", "engine", default=1, lo=1, hi=4096, flags=("-dp",), metavar="N")
    pipeline_parallel_size: int = _p("int", "pipeline stages per replica (layers split across them; the pool is the "
                                     "smallest stage's)", "engine", default=1, lo=1, hi=256, flags=("-pp",), metavar="N")
    enable_expert_parallel: bool = _p("bool", "experts split whole over the TP x DP ranks instead of each sharded over TP",
                                      "engine", default=False, flags=("-ep",))
    dtype: str = _p("choice", "dtype of unquantised weights (default: the config's)", "engine", default="auto",
                    choices=("auto", "bfloat16", "float16", "half", "float32"))
    quantization: str = _p("text", "vLLM's --quantization method (fp8, modelopt_fp4, awq_marlin, compressed-tensors, "
                           "bitsandbytes, experts_int8, ...: those the --vllm-version accepts, read with the checkpoint's "
                           "quantization_config), or servesize's native / bf16 / fp16 and the calculator seed's int8 / "
                           "int4 / nvfp4", "engine", default="native", flags=("-q",), metavar="METHOD")
    kv_cache_dtype: str = _p("text", "KV cache element type, as the --vllm-version accepts it (auto, bfloat16, fp8, "
                             "fp8_e5m2, nvfp4, int8_per_token_head, fp8_ds_mla, ...)", "engine", default="auto",
                             metavar="DTYPE")
    gpu_memory_utilization: float | None = _p(
        "float", "fraction of GPU memory vLLM may use (default: the vLLM version's, 0.90 before v0.20, 0.92 from v0.20)",
        "engine", lo=0.0, hi=1.0, lo_open=True, metavar="U", slider=Slider(0.01, "linear", (0.5, 0.98)))
    max_model_len: int | None = _p(
        "vllm_len", "longest request, read as vLLM reads it (32768, 32k = 32,000, 32K = 32,768; auto or -1: the largest "
        "that fits; memory: default the model's context; plan: the workload's cap, at most the model's)", "engine",
        lo=1, hi=MAX_TOKENS, metavar="TOKENS", unit="tokens", slider=Slider(0, "log", (4096, 1 << 20)))
    max_num_seqs: int | None = _p("int", f"sequences in one batch (default: {batch_default_words('seqs')})", "engine",
                                  lo=1, hi=1 << 20, metavar="N")
    max_num_batched_tokens: int | None = _p(
        "vllm_int", "the profile batch, read as vLLM reads it (8K = 8,192); the activation reserve grows with it "
        f"(default {batch_default_words('batched_tokens')})", "engine", lo=1, hi=MAX_TOKENS,
        metavar="TOKENS", unit="tokens",
        sensitivity=SensitivityRow("max_num_batched_tokens", "engine", 512.0, 32768.0, "tokens", field="chunk_tokens",
                                   geometric=True))
    block_size: int | None = _p("int", "KV block size in tokens (default 16, CPU 128; MLA backends force 16/32/64/128)",
                                "engine", lo=1, hi=1 << 16, metavar="TOKENS")
    kv_cache_memory_bytes: int | None = _p(
        "vllm_bytes", "KV memory per GPU, taken as given (vLLM then ignores the utilisation budget); vLLM's spelling "
        "(16G = 16 GiB, 16g = 16e9) or an explicit unit (6.51GiB, 80GB)", "engine",
        lo=1, hi=1 << 50, flags=("--kv-cache-memory",), metavar="BYTES", unit="B")
    num_gpu_blocks_override: int | None = _p("int", "the engine's block count, taken as given", "engine", lo=1,
                                             hi=1 << 32, metavar="N")
    enable_prefix_caching: bool | None = _p("bool", "automatic prefix caching (default on; off for attention-free "
                                            "models and MLA on the CPU build)", "engine")
    enable_chunked_prefill: bool | None = _p("bool", "chunked prefill (default on in V1); off, the profile batch must "
                                             "hold a whole max_model_len prompt", "engine")
    enforce_eager: bool = _p("bool", "no CUDA graphs (nothing reserved for them)", "engine", default=False)
    moe_backend: str = _p("choice", "vLLM's fused-MoE kernel (from v0.17; VLLM_MXFP4_USE_MARLIN=1 before it is "
                          "marlin): marlin reads FP4 experts on a GPU without FP4 tensor cores at Marlin's measured "
                          "rate (gpus.toml fp4_moe_marlin_tbps) where it is measured; auto and the others at the "
                          "default kernel's", "engine", default="auto", choices=MOE_BACKENDS, metavar="BACKEND")
    disable_hybrid_kv_cache_manager: bool = _p("bool", "every sliding-window layer cached as full attention (no window "
                                               "savings)", "engine", default=False)
    mamba_ssm_cache_dtype: str | None = _p(
        "choice", "recurrent-state dtype for GDN/Mamba layers (default: the config's mamba_ssm_dtype; the CPU build "
        "float32)", "engine", choices=("auto", "float32", "bfloat16", "float16"), flags=("--state-dtype",))
    mamba_cache_mode: str | None = _p(
        "choice", "recurrent-state blocks per request: none = 1, align = 2 (default: align with prefix caching, "
        "which hybrids get from v0.26)", "engine", choices=("none", "align"))
    speculative_config: str | None = _p(
        "json", "vLLM's --speculative-config JSON: {\"method\": \"mtp\" | \"eagle\" | \"eagle3\" | \"draft_model\" | "
        "\"ngram\" | \"suffix\", \"model\": draft (catalogue name, config path or HF id), \"num_speculative_tokens\": "
        "k}: the draft's weights, its attention layers in the pool, k more state rows for hybrids", "engine",
        metavar="JSON")
    num_speculative_tokens: int | None = _p(
        "int", "MTP draft tokens, short for --speculative-config '{\"method\": \"mtp\", ...}' (memory: default 0; "
        "plan: default the model's MTP head with decode.mtp_drafts drafts when it has one)", "engine",
        lo=0, hi=16, flags=("--spec-tokens",), metavar="K")
    enable_lora: bool = _p("bool", "reserve LoRA adapter slots: max_loras x max_lora_rank A/B matrices for every "
                           "attention and MLP projection (vLLM allocates them with the weights)", "engine", default=False)
    max_loras: int = _p("int", "LoRA adapters served in one batch (each one slot)", "engine", default=1, lo=1, hi=1024,
                        metavar="N")
    max_lora_rank: int = _p("int", "the largest LoRA rank a slot holds", "engine", default=16, lo=1, hi=4096,
                            metavar="R")
    fully_sharded_loras: bool = _p("bool", "shard the LoRA A and B matrices over TP as well", "engine", default=False)
    limit_mm_per_prompt: str | None = _p(
        "json", "vLLM's per-prompt multimodal limits, e.g. '{\"image\": 0, \"video\": 0}': every modality at 0 loads "
        "the language model only (no vision tower)", "engine", metavar="JSON")
    vllm_version: str = _p("version", "engine version whose rules apply (log formula, defaults, CUDA graphs, flag and "
                           "value vocabulary)", "engine", default=DEFAULT_VLLM_VERSION, metavar="X.Y.Z")
    device: str = _p("choice", "cpu: vLLM's CPU build (its defaults: block 128, batch 2048 per rank, float32 states, "
                     "MLA block 16)", "engine", default="cuda", choices=("cuda", "cpu"))
    cpu_avx512_bf16: str = _p("choice", "with --device cpu, the CPU vLLM runs on: auto reads this machine's "
                              "/proc/cpuinfo; yes/no: one with/without AVX-512 BF16 (vLLM's CPU build stores "
                              "recurrent states in float32 only on CPUs with it)", "engine", default="auto",
                              choices=("auto", "yes", "no"))
    cpu_amx: str = _p("choice", "with --device cpu, whether that CPU has AMX tiles: vLLM's CPU build then serves MLA "
                      "models with its AMX backend (block as asked, prefix caching kept) instead of the reference one "
                      "(block 16); auto reads this machine's /proc/cpuinfo (none where --cpu-avx512-bf16 is no)",
                      "engine", default="auto", choices=("auto", "yes", "no"))
    budget: str = _p("choice", "engine: vLLM's own budget with a named reserve estimate; simple: the calculator seed's "
                     "(utilisation minus weights)", "engine", default="engine", choices=("engine", "simple"))

    # -- measured pool, calibration -------------------------------------------------------
    pool_tokens: int | None = _p("tokens", "a measured KV pool per replica in tokens, e.g. 2.77m", "calibration", lo=1,
                                 hi=10**13, unit="tokens", metavar="TOKENS")
    calibration: Calibration | str | None = _p("calibration", "a calibration file (servesize calibrate): its pool "
                                               "replaces the model's", "calibration", metavar="FILE")
    calibration_mismatch_ok: bool = _p("bool", "apply --calibration even where it was measured on another model, TP, GPU, "
                                       "KV dtype or memory utilisation (refused otherwise, naming the field)", "calibration", default=False)


    def __post_init__(self) -> None:
        for name, param in PARAMS.items():
            object.__setattr__(self, name, param.parse(getattr(self, name)))
        if self.gpus is None:
            raise BadInput("--gpus is required: N x GPU type, e.g. 1xH200 (servesize gpus lists them)", field="gpus")
        if self.model is None and self.vllm_serve is None:
            raise BadInput("name a MODEL (catalogue name, config.json path or Hugging Face id), or give --vllm-serve "
                           "'vllm serve MODEL ...'", field="model")
        # --quantization is checked with the checkpoint (engine.quant_methods.weight_format), which may name its own
        check_vocabulary("native", self.kv_cache_dtype, parse_version(self.vllm_version))

    def replace(self, **changes: Any) -> Scenario:
        """A copy with some fields changed (validated again); unknown names are refused."""
        unknown = sorted(set(changes) - set(PARAMS))
        if unknown:
            raise BadInput(f"Scenario has no field {', '.join(unknown)}; fields: {', '.join(PARAMS)}")
        return replace(self, **changes)

    @property
    def disaggregated(self) -> bool:
        """Whether this asks for prefill and decode apart (--prefill-instances or --decode-instances given)."""
        return self.prefill_instances is not None or self.decode_instances is not None

    def explicit(self) -> dict[str, Any]:
        """The fields that differ from their declared default (what a share link or a log needs)."""
        defaults = {f.name: f.default for f in fields(self)}
        out = {}
        for name in PARAMS:
            value = getattr(self, name)
            if defaults[name] is MISSING or value != defaults[name]:
                out[name] = value
        return out

    def to_dict(self) -> dict[str, Any]:
        """Every field as JSON-ready data (a Workload or Calibration object as its own dict)."""
        out: dict[str, Any] = {}
        for name in PARAMS:
            value = getattr(self, name)
            out[name] = value.to_dict() if hasattr(value, "to_dict") else value
        return out


_NAMED: dict[int, Param] = {}  # id of a declared Param -> the same Param with its field's name (one object per field)


def _named(f: Any) -> Param:
    """The field's Param with its name filled in: the same object wherever the field is shared (a group's
    field inherited, or a ``_shared`` reference), so one declaration is one Param."""
    declared = f.metadata["param"]
    if id(declared) not in _NAMED:
        _NAMED[id(declared)] = declared if declared.name else replace(declared, name=f.name)
    return _NAMED[id(declared)]


def _own_params(cls: type) -> dict[str, Param]:
    return {f.name: _named(f) for f in fields(cls)}


def _declared(cls: type, group_order: tuple[str, ...] | None = None) -> dict[str, Param]:
    """The class's Params, in declaration order within each group, the groups in ``group_order`` (a dataclass
    lists the fields of the groups it takes first; the flags and docs read the query's own order)."""
    params = _own_params(cls)
    if group_order is None:
        return params
    return {p.name: p for p in sorted(params.values(), key=lambda p: group_order.index(p.group))}


PARAMS: dict[str, Param] = _declared(Scenario, ("model", "disagg", "engine", "workload", "knobs", "calibration",
                                                "monte_carlo"))
SWEEPABLE = tuple(p.name for p in PARAMS.values() if p.sweep)
# The sensitivity panel's rows, by row name, from the declarations of the fields they vary (an empty ``field`` is
# the field's planner name, its Param's target), in the order the panel prints them (the knobs, then the workload,
# then the engine's chunk)
_PANEL_GROUPS = ("knobs", "workload", "engine")
SENSITIVITY_ROWS: dict[str, SensitivityRow] = {
    p.sensitivity.name: replace(p.sensitivity, field=p.sensitivity.field or p.target)
    for p in sorted(PARAMS.values(), key=lambda p: _PANEL_GROUPS.index(p.group) if p.group in _PANEL_GROUPS else -1)
    if p.sensitivity is not None}


def params_in(*groups: str) -> list[Param]:
    """The declared fields of the named groups, in declaration order."""
    return [p for p in PARAMS.values() if p.group in groups]


_SCENARIO_FIELDS = {f.name: f for f in fields(Scenario)}


def _shared(name: str, *, required: bool = False) -> Any:
    """A field declared by Scenario, referenced as it is: the same Param (kind, bounds, help) and the same default
    (``required``: the query has no default for it)."""
    declared = _SCENARIO_FIELDS[name]
    if required:
        return field(metadata=declared.metadata)
    return field(default=declared.default, metadata=declared.metadata)


@frozen
class FitQuery:
    """``servesize fit``: what these GPUs can serve: by default one row per model (the checkpoint's own precision,
    the smallest placement that serves); ``all_placements`` for every precision and placement."""

    gpus: str = _shared("gpus", required=True)
    max_model_len: int = _p("tokens", "tokens per sequence the concurrency is counted at, as vLLM's --max-model-len "
                            "(8192 = 8K; 8k is 8,000)", "fit", default=8192, lo=1, hi=MAX_TOKENS, unit="tokens",
                            flags=("--context",), metavar="TOKENS")
    precision: str | None = _p("text", "comma list of native, bf16, fp16, fp8, int8, int4, mxfp4, nvfp4 (default: the "
                               "checkpoint's own; with --all, a quantised checkpoint as it is and any other at bf16, fp8 "
                               "and int4)", "fit", metavar="LIST")
    models: str | None = _p("text", "comma list of catalogue names or config paths (default: the whole catalogue)",
                            "fit", metavar="LIST")
    budget: str = _shared("budget")
    kv_cache_dtype: str = _shared("kv_cache_dtype")
    gpu_memory_utilization: float | None = _shared("gpu_memory_utilization")
    vllm_version: str = _shared("vllm_version")
    min_concurrency: int = _p("int", "smallest per-replica concurrency a placement should reach", "fit",
                              default=DEFAULT_MIN_CONCURRENCY, lo=1, hi=1 << 20, metavar="N")
    all_placements: bool = _p("bool", "every precision and every TP x replicas placement that fits (default: one row "
                              "per model, the checkpoint's own precision on the smallest placement that serves)", "fit",
                              default=False, flags=("--all",))

    def __post_init__(self) -> None:
        for name, param in FIT_PARAMS.items():
            object.__setattr__(self, name, param.parse(getattr(self, name)))

    @property
    def context(self) -> int:
        """The same number, under the name ``fit`` used before it took vLLM's."""
        return self.max_model_len

    def precisions(self) -> tuple[str, ...] | None:
        """The precisions asked for: --precision, else the checkpoint's own (one row per model), else under
        --all None (a quantised checkpoint as it is, any other at bf16, fp8 and int4)."""
        given = _comma_list(self.precision)
        if given is not None or self.all_placements:
            return given
        return ("native",)

    def model_names(self) -> tuple[str, ...] | None:
        return _comma_list(self.models)


def _comma_list(text: str | None) -> tuple[str, ...] | None:
    """The items of a comma list, each once, in the order first given: a list's work is one pass per distinct item, so
    ``fp8,`` repeated 20,000 times (an 80 KB body) is one precision, not 20,000 fits of the same one."""
    if text is None:
        return None
    items = tuple(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    return items or None


FIT_PARAMS: dict[str, Param] = _declared(FitQuery)
