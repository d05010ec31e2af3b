"""What the explorer's form is made of, served to the page by ``GET /api/catalogue``.

The page draws every control from this: the Scenario's own declaration (``servesize.scenario``:
kind, bounds, help, group, choices, the default a None takes), the two fields only the page has
(the load it is priced at: users and a cold burst, declared here with the same ``Param``), and the
layout: which control goes in which section. A slider is declared on its field (``Param.slider``: step,
scale, and a span where nothing else gives one); its range is a view of the field, not its bound: the
server enforces the declared bounds, and the text box beside every slider takes any value inside them.
Where a range has a source (the field's sensitivity row, an assumption's low/high bracket in
data/assumptions.toml) it is read from there.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any

from servesize.api import BURST_FLUSH, MODELLED_KV_CACHE_DTYPES, PRECISIONS
from servesize.assumptions import assumption, modelled_assumptions
from servesize.errors import BadInput, clip
from servesize.fleet_query import FLEET_PARAMS, FleetQuery
from servesize.scenario import FIT_PARAMS, GROUPS, PARAMS, FitQuery, Param, Scenario, Slider
from servesize.web.server import MAX_BODY_BYTES

# -- the page's own fields ----------------------------------------------------------------------

VIEW_GROUPS = {
    "load": "your load (the page's own: `servesize plan` prices latency at the binding ceiling)",
}

VIEW_PARAMS: dict[str, Param] = {p.name: p for p in (
    Param("int", "concurrent users: your load; TTFT, burst tolerance and the bill are priced at it (default: the "
          "binding ceiling, as servesize plan does)", "load", name="load_users", lo=1, hi=1_000_000, metavar="N",
          slider=Slider(0, "log", (1, 4096))),
    Param("int", "cache misses arriving at the same instant (a cold burst); 'flush' = one replica group's warm "
          "users p5", "load", name="burst", lo=1, hi=1_000_000, metavar="N",
          slider=Slider(1, "linear", (1, 512))),
)}

# -- bounded work per request ---------------------------------------------------------------------

# The Scenario allows fills <= 100,000 and draws <= 2**20 for a command someone waits for; a page
# recomputes on every slider move, so the server takes at most these.
WEB_LIMITS = {"fills": 2000, "draws": 20000}
MAX_GPUS = 1024              # the GPU count in `gpus` (the fit's placements grow with log2 of it)
# a fleet search grows with --max-gpus (replica counts per shape) and the teams (one window each): the
# command line takes up to 4,096 GPUs; the page searches at most 256 (a few seconds over every GPU type)
FLEET_LIMITS = {"max_gpus": 256, "items": 8}  # items: teams, priorities, GPU-hour prices
DRAFT_FILLS = 300            # a slider being dragged gets a draft at this many fills; the full one on release

# -- slider ranges ---------------------------------------------------------------------------------

def slider_range(name: str) -> dict | None:
    """min, max, step (0 = continuous), scale and where the range comes from, all read from the field's declaration
    (``Param.slider``): the span of its sensitivity row, else its assumption's low/high bracket, else the span the
    declaration gives the page. None: the field has no slider."""
    param = PARAMS.get(name) or VIEW_PARAMS.get(name)
    if param is None or param.slider is None:
        return None
    slider, row = param.slider, param.sensitivity
    if row is not None:
        return {"min": row.lo, "max": row.hi, "step": slider.step,
                "scale": slider.scale or ("log" if row.geometric else "linear"),
                "source": "the sensitivity panel's search range (the field's declaration, servesize/scenario.py)"}
    bracket = modelled_assumptions().get(param.assumption) if param.assumption else None
    if bracket is not None and "low" in bracket and "high" in bracket:
        return {"min": bracket["low"], "max": bracket["high"], "step": slider.step, "scale": slider.scale or "linear",
                "source": f"the bracket of {param.assumption} in data/assumptions.toml"}
    if slider.span is not None:
        return {"min": slider.span[0], "max": slider.span[1], "step": slider.step, "scale": slider.scale or "linear",
                "source": "the span the page offers"}
    raise AssertionError(f"{name}: a slider with no range (give its Param a sensitivity row, an assumption with a "
                         "bracket or a span)")


# -- the layout ------------------------------------------------------------------------------------

QUANTIZATIONS = ("native", *PRECISIONS)

PLAN_SECTIONS: tuple[dict, ...] = (
    # the controls a visitor changes most come first (on a phone they follow the verdict at once):
    # model, GPUs, split, weights, KV dtype, then the prompt median (before the preset it overrides)
    {"id": "setup", "title": "Set-up", "lede": "Hardware, model and serving dtypes: these change most numbers on the page.",
     "fields": ["model", "gpus", "split", "quantization", "kv_cache_dtype"]},
    {"id": "workload", "act": 1, "title": "Workload", "lede": "Who uses it, and what their prompts look like.",
     "fields": ["median", "preset", "sigma", "subagent_median", "subagent_sigma", "subagent_ratio",
                "subagents_share_prefix", "prefix", "workload"]},
    {"id": "serving", "title": "Serving options", "lede": "The recurrent-state dtype, the MTP head, CPU offload and the "
     "context cap: fewer deployments change these.",
     "fields": ["mamba_ssm_cache_dtype", "mtp_speedup", "cpu_offload_gib", "max_model_len"]},
    {"id": "load", "act": 2, "title": "Load and cold traffic",
     "lede": "How much traffic arrives, how cold it is, and how fast it must be answered.",
     "fields": ["load_users", "think_time", "warm_turn_tokens", "ttft_limit", "invalidation", "burst"]},
    {"id": "cost", "act": 3, "title": "Tariff", "lede": "What a kWh costs you, and the facility's overhead.",
     "fields": ["electricity_price", "currency", "pue"]},
)
_NOT_IN_ADVANCED = {"calibration"}  # uploaded in the "test these predictions" section
# not on the page yet: a disaggregated layout is planned by `servesize plan --prefill-instances X --decode-instances
# Y` (api.plan_disaggregated); the page's layout control is issue 32's item 8
_NOT_ON_THE_PAGE_GROUPS = {"disagg"}
FIT_FIELDS = ("gpus", "max_model_len", "gpu_memory_utilization", "precision", "kv_cache_dtype", "budget", "min_concurrency",
              "all_placements", "models", "vllm_version")


FLEET_SECTIONS: tuple[dict, ...] = (
    {"id": "fleet-who", "title": "Who to serve",
     "lede": "N users on one workload, or several teams, each with its own preset and priority.",
     "fields": ["users", "team", "preset", "median", "sigma", "prefix", "subagent_ratio", "think_time", "invalidation",
                "ttft_limit"]},
    {"id": "fleet-space", "title": "What to search",
     "lede": "GPU type x count x weight precision x KV dtype x TP/DP: every combination of these lists.",
     "fields": ["models", "gpus_from", "max_gpus", "precision", "kv_cache_dtype", "tensor_parallel_size", "top"]},
    {"id": "fleet-price", "title": "Prices",
     "lede": "GPU-hour prices are dated public rentals (data/prices.toml); give your own per GPU.",
     "fields": ["gpu_hour_price", "currency", "price_includes_power", "electricity_price", "pue"]},
)
_FLEET_NOT_SHOWN = {"priority", "workload"}  # priority: in the teams control; a workload file: `servesize fleet`


def fleet_advanced_fields() -> list[str]:
    shown = {f for s in FLEET_SECTIONS for f in s["fields"]}
    return [n for n in FLEET_PARAMS if n not in shown and n not in _FLEET_NOT_SHOWN]


def fleet_form(gpu_keys: list[str]) -> dict:
    """The fleet view's form: FleetQuery's declaration; the comma lists as check boxes where the choices are known."""
    defaults = {f.name: f.default for f in fields(FleetQuery)}
    out = {n: describe(p, defaults[n]) for n, p in FLEET_PARAMS.items()}
    lists = {"precision": list(QUANTIZATIONS), "kv_cache_dtype": list(dict.fromkeys(MODELLED_KV_CACHE_DTYPES)),
             "gpus_from": gpu_keys}
    for name, choices in lists.items():
        out[name].update(widget="multi", choices=choices)
    out["team"]["widget"] = "teams"
    out["team"]["fields"] = ["team", "priority"]
    sections = [dict(s) for s in FLEET_SECTIONS]
    sections.append({"id": "fleet-advanced", "title": "Every other field", "collapsed": True,
                     "lede": "vLLM's remaining flags, the modelled assumptions and the Monte-Carlo, as `servesize fleet` "
                             "takes them.", "fields": fleet_advanced_fields()})
    return {"fields": out, "sections": sections, "limits": FLEET_LIMITS}


def advanced_fields() -> list[str]:
    shown = {f for s in PLAN_SECTIONS for f in s["fields"]}
    return [n for n, p in PARAMS.items() if n not in shown and n not in _NOT_IN_ADVANCED
            and n not in ("tensor_parallel_size", "data_parallel_size") and p.group not in _NOT_ON_THE_PAGE_GROUPS]


def _listed() -> dict[str, tuple[str, ...]]:
    """Text fields the page offers as a list: the precisions and the KV dtypes servesize models (the CLI takes
    every name the --vllm-version accepts and says which it cannot model)."""
    return {"quantization": tuple(QUANTIZATIONS), "kv_cache_dtype": tuple(dict.fromkeys(MODELLED_KV_CACHE_DTYPES))}


_LISTED = _listed()


def _widget(p: Param, name: str) -> str:
    if name in ("model", "gpus", "split", "workload"):
        return name
    if name in _LISTED or p.kind == "choice":
        return "select"
    if p.kind == "bool":
        return "toggle"
    if slider_range(name) is not None and p.kind in ("tokens", "int", "float", "bytes"):
        return "slider"
    return "text"


def _json_default(value: Any) -> Any:
    if value is MISSING:
        return None
    return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)


def describe(p: Param, declared_default: Any = MISSING) -> dict:
    """One field as the page needs it: kind, bounds, help, choices, default."""
    choices = list(p.choices) or list(_LISTED.get(p.name, ()))
    default_value = None
    if p.assumption is not None:
        default_value = assumption(p.assumption)
    elif p.seed_value is not None:
        default_value = p.seed_value
    elif declared_default is not MISSING:
        default_value = _json_default(declared_default)
    return {
        "name": p.name, "kind": p.kind, "group": p.group, "flag": p.flag, "aliases": list(p.flags),
        "help": p.full_help(), "lo": p.lo, "hi": p.hi, "lo_open": p.lo_open, "range_text": p.range_text(),
        "choices": choices, "unit": p.unit, "required": declared_default is MISSING,
        "default": default_value, "default_text": p.describe_default(), "sweep": p.sweep,
        "widget": _widget(p, p.name), "slider": slider_range(p.name),
    }


def form(gpu_keys: list[str] | None = None) -> dict:
    """The whole form: every field of both views, the sections and the limits."""
    scenario_defaults = {f.name: f.default for f in fields(Scenario)}
    fit_defaults = {f.name: f.default for f in fields(FitQuery)}
    plan_fields = {n: describe(p, scenario_defaults[n]) for n, p in PARAMS.items()
                   if p.group not in _NOT_ON_THE_PAGE_GROUPS}
    plan_fields.update({n: describe(p, None) for n, p in VIEW_PARAMS.items()})
    plan_fields["split"] = {"name": "split", "kind": "split", "widget": "split", "group": "engine",
                            "help": "how the GPUs divide into replicas (data parallel) x GPUs per replica (tensor "
                                    "parallel); splits whose weights do not fit are disabled",
                            "fields": ["data_parallel_size", "tensor_parallel_size"]}
    fit_fields = {n: describe(p, fit_defaults[n]) for n, p in FIT_PARAMS.items()}
    fit_fields["gpus"]["widget"] = "gpus"
    fit_fields["precision"]["choices"] = list(QUANTIZATIONS)
    fit_fields["precision"]["widget"] = "multi"
    sections = [dict(s) for s in PLAN_SECTIONS]
    sections.append({"id": "advanced", "title": "Every other field", "collapsed": True,
                     "lede": "vLLM's remaining flags, the modelled assumptions, a measured pool and the Monte-Carlo, "
                             "each with its declared bound and default.",
                     "fields": advanced_fields()})
    return {
        "groups": {**GROUPS, **VIEW_GROUPS},
        "plan": {"fields": plan_fields, "sections": sections},
        "fit": {"fields": fit_fields, "order": list(FIT_FIELDS)},
        "fleet": fleet_form(gpu_keys or []),
        "limits": {**WEB_LIMITS, "max_gpus": MAX_GPUS, "draft_fills": DRAFT_FILLS, "max_body_bytes": MAX_BODY_BYTES},
        "burst_flush": BURST_FLUSH,
    }


# -- a control's text, read as the command line reads it --------------------------------------------

_VIEW_FIELDS = {"plan": {**PARAMS, **VIEW_PARAMS}, "fit": FIT_PARAMS, "fleet": FLEET_PARAMS}


def read_value(view: object, name: object, text: object) -> dict:
    """What a control's text means, by the field's own declaration (Param.parse: '45k' = 45,000 for a
    token count, '16K' = 16,384; bounds checked): the page places a slider's thumb at this value, so no
    units rule lives in the page. A refusal is the same line the command line prints, naming the field."""
    fields_of = _VIEW_FIELDS.get(view) if isinstance(view, str) else None
    if fields_of is None:
        raise BadInput(f"view: one of {', '.join(_VIEW_FIELDS)}, not {clip(view)}")
    param = fields_of.get(name) if isinstance(name, str) else None
    if param is None:
        raise BadInput(f"field: {clip(name)} is not a field of the {view} view")
    if not isinstance(text, (str, int, float)) or isinstance(text, bool):
        raise BadInput(f"{param.flag}: give the control's text (a string)")
    return {"field": param.name, "value": param.parse(text)}


# -- presets and where the page starts --------------------------------------------------------------

START = {"plan": {"model": "qwen3.6-27b", "gpus": "1xH200", "quantization": "fp8", "kv_cache_dtype": "fp8"},
         "fit": {"gpus": "1xH100"},
         "fleet": {"models": "qwen3.6-27b", "users": 400}}


def presets() -> dict:
    """Named values a click applies; brackets come from data/assumptions.toml."""
    table = modelled_assumptions()
    pue = table["power.pue"]
    out: dict[str, list[dict]] = {
        "burst": [{"label": "one miss", "values": {"burst": 1}},
                  {"label": "a burst of 32", "values": {"burst": 32}},
                  {"label": "full flush (warm users p5 of one group)", "values": {"burst": BURST_FLUSH}}],
        "pue": [{"label": f"{pue['low']:g} hyperscale", "values": {"pue": pue["low"]}},
                {"label": f"{pue['default']:g} colocation", "values": {"pue": pue["default"]}},
                {"label": f"{pue['high']:g} server room", "values": {"pue": pue["high"]}}],
        "workload": [{"label": "the preset's own fields (clear the overrides)", "values": {
            n: None for n, p in PARAMS.items() if p.group == "workload" and n != "preset"}},
                     {"label": "no subagents", "values": {"subagent_ratio": 0}}],
        "assumptions": [{"label": "servesize's defaults", "values": {"assumptions": "default"}},
                        {"label": "the warm-capacity seed's values", "values": SEED_DEPLOYMENT}],
    }
    return out


# The warm-capacity seed's deployment and assumptions (seed 000, https://tomvaucourt.com/posts/qwen-h200-working-set/
# and https://github.com/T0mSIlver/working-set docs/scenarios.md; figures quoted in tests/fixtures/seeds.json):
# Qwen 3.6 27B FP8 with FP8 KV on one H200, vLLM 0.19.0, the recurrent state in bfloat16, the projected
# 2.77M-token FP8 pool (seeds.json seed-000-working-set-repository: "2.77M FP8 calibration") and the seed's
# modelled assumptions. With these alone the page reproduces its median table
# (86/56/42/33/28/23 p50, 69/45/34/27/23/19 p5; tests/web/test_web_api.py). The median is cleared: the preset's.
SEED_DEPLOYMENT = {"model": "qwen3.6-27b", "gpus": "1xH200", "quantization": "fp8", "kv_cache_dtype": "fp8",
                   "mamba_ssm_cache_dtype": "bfloat16", "vllm_version": "0.19.0", "pool_tokens": 2_770_000,
                   "assumptions": "seed", "preset": None, "median": None}
