"""Request JSON -> a Scenario / FitQuery, or a refusal that names the field (HTTP 400).

A request is one flat JSON object: the Scenario's fields by their names (values as the command
line reads them: ``"31k"`` or ``31000``), the page's own load and tariff fields
(``servesize.web.form.VIEW_PARAMS``), and the content of an upload:

- ``model``       a catalogue name (or the Hugging Face id of a catalogue entry), or a config.json's
                  content as an object; a path or any other Hugging Face id is refused: the server
                  reads no file a client names and makes no network request;
- ``workload``    a workload file's content as an object (read as ``plan --workload`` reads the file), never a path;
- ``calibration`` a Calibration as ``/api/calibrate`` returned it (``Calibration.from_dict``), never
                  a path.

Every refusal is ``RequestError(message, field)``; a library refusal carries the field it is about
(``ServesizeError.field``: set where the value is checked, e.g. ``Param.parse`` for every declared bound).
"""

from __future__ import annotations

from typing import Any

from servesize.api import Load, Workload, preset_names, workload_of_data
from servesize.errors import BadInput, DoesNotFit, ServesizeError
from servesize.fleet_query import FLEET_PARAMS, FleetQuery
from servesize.frozen import frozen
from servesize.model.catalogue import find_entry
from servesize.model.hardware import parse_gpus
from servesize.scenario import FIT_PARAMS, PARAMS, FitQuery, Scenario
from servesize.vllm_logs.calibration import LOG_HINTS, Calibration
from servesize.web.form import BURST_FLUSH, FLEET_LIMITS, MAX_GPUS, VIEW_PARAMS, WEB_LIMITS


class RequestError(BadInput):
    """A request the explorer refuses: one line, and the field it is about (None: the request as a whole)."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message, field=field)

    def to_dict(self) -> dict:
        return {"error": str(self), "field": self.field}


def field_of(exc: ServesizeError) -> str | None:
    """The field a library refusal is about: the one the library set where it checked the value
    (``ServesizeError.field``), else the model for a deployment that does not fit."""
    if exc.field is not None:
        return exc.field
    return "model" if isinstance(exc, DoesNotFit) else None


def refusal(exc: ServesizeError) -> dict:
    """The HTTP 400 body for any library refusal."""
    return {"error": str(exc), "field": field_of(exc)}


# -- reading one request ------------------------------------------------------------------------

UPLOAD_FIELDS = ("model", "workload", "calibration")
CONTROL_FIELDS = ("draft",)


@frozen
class PlanRequest:
    scenario: Scenario
    load: Load
    draft: bool = False


def _object(body: Any) -> dict:
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object of fields, e.g. "
                           '{"model": "qwen3.6-27b", "gpus": "1xH200"}')
    return body


def _unknown(body: dict, known: set[str]) -> None:
    for name in body:
        if name not in known:
            raise RequestError(f"unknown field {name!r}; the fields are those of `servesize plan` by their "
                               "Scenario names (GET /api/catalogue lists them)", name)


def _model(value: Any) -> Any:
    if isinstance(value, dict):
        return value  # a config.json's content: the Scenario parses it (InlineConfig), never stores or runs it
    if not isinstance(value, str) or not value.strip():
        raise RequestError("model: give a catalogue name (servesize models) or upload a config.json", "model")
    if find_entry(value) is None:
        raise RequestError(f"model {value.strip()!r} is not in the catalogue; the explorer reads no files and makes no "
                           "network requests: upload the model's config.json instead", "model")
    return value


def _workload(value: Any) -> Workload | None:
    if value is None or isinstance(value, Workload):
        return value
    if not isinstance(value, dict):
        raise RequestError("workload: upload a workload file's content (servesize workload fit writes one), not a "
                           "path: the explorer reads no files", "workload")
    try:
        return workload_of_data(value)  # as plan --workload reads the file: over the preset it names
    except BadInput as exc:
        raise RequestError(str(exc), "workload") from None


def _calibration(value: Any) -> Calibration | None:
    if value is None or isinstance(value, Calibration):
        return value
    if not isinstance(value, dict):
        raise RequestError("calibration: paste the vLLM start-up log (POST /api/calibrate reads it), not a path: "
                           "the explorer reads no files", "calibration")
    try:
        return Calibration.from_dict(value)
    except (BadInput, TypeError, ValueError) as exc:
        raise RequestError(f"calibration: {exc}", "calibration") from None


def _gpus(value: Any) -> Any:
    if isinstance(value, str) and value.strip():
        try:
            count = parse_gpus(value).count
        except BadInput as exc:
            raise RequestError(str(exc), "gpus") from None
        if count > MAX_GPUS:
            raise RequestError(f"--gpus {value!r}: the explorer plans at most {MAX_GPUS:,} GPUs", "gpus")
    return value


def _limits(values: dict) -> None:
    for name, most in WEB_LIMITS.items():
        if values.get(name) is None:
            continue
        typed = PARAMS[name].parse(values[name])
        if typed > most:
            raise RequestError(f"{PARAMS[name].flag} {typed:,} is more than the explorer computes per request "
                               f"({most:,}); run `servesize plan` for more", name)


def scenario_of(body: Any, *, extra: tuple[str, ...] = ()) -> tuple[Scenario, dict]:
    """The Scenario a request describes, and the request's other (``extra``) fields, unread."""
    body = _object(body)
    _unknown(body, set(PARAMS) | set(extra))
    values = {k: v for k, v in body.items() if k in PARAMS and v is not None}
    if "model" not in values or "gpus" not in values:
        missing = "model" if "model" not in values else "gpus"
        raise RequestError(f"{missing} is required", missing)
    values["model"] = _model(values["model"])
    values["gpus"] = _gpus(values["gpus"])
    values["workload"] = _workload(values.get("workload"))
    values["calibration"] = _calibration(values.get("calibration"))
    _limits(values)
    try:
        scenario = Scenario(**values)
    except BadInput as exc:
        raise RequestError(str(exc), field_of(exc)) from None
    return scenario, {k: body[k] for k in extra if k in body}


def _load(values: dict) -> Load:
    typed: dict[str, Any] = {}
    for name, p in VIEW_PARAMS.items():
        value = values.get(name)
        if value is None or value == "":
            continue
        if name == "burst" and value == BURST_FLUSH:
            typed[name] = BURST_FLUSH
            continue
        try:
            typed[name] = p.parse(value)
        except BadInput as exc:
            raise RequestError(str(exc), name) from None
    return Load(**typed)


def plan_request(body: Any) -> PlanRequest:
    """POST /api/plan (and the panels that take the same body)."""
    scenario, rest = scenario_of(body, extra=(*VIEW_PARAMS, *CONTROL_FIELDS))
    draft = rest.get("draft", False)
    if not isinstance(draft, bool):
        raise RequestError("draft must be true or false", "draft")
    return PlanRequest(scenario, _load(rest), draft)


def fit_query(body: Any) -> FitQuery:
    """POST /api/fit: FitQuery's fields; ``models`` only catalogue names."""
    body = _object(body)
    _unknown(body, set(FIT_PARAMS))
    values = {k: v for k, v in body.items() if v is not None}
    if "gpus" not in values:
        raise RequestError("gpus is required", "gpus")
    values["gpus"] = _gpus(values["gpus"])
    names = values.get("models")
    if isinstance(names, str):
        for name in (x.strip() for x in names.split(",") if x.strip()):
            if find_entry(name) is None:
                raise RequestError(f"models: {name!r} is not in the catalogue (the explorer reads no files)", "models")
    try:
        return FitQuery(**values)
    except BadInput as exc:
        raise RequestError(str(exc), field_of(exc)) from None


def text_field(body: Any, name: str, what: str) -> str:
    """An uploaded text (a vLLM log, a run record) from the request."""
    value = body.get(name) if isinstance(body, dict) else None
    if not isinstance(value, str) or not value.strip():
        raise RequestError(f"{name}: paste or upload {what}", name)
    return value


def log_hints(body: Any) -> dict[str, int | str]:
    """The calibrate panel's controls (``LOG_HINTS``: what a hybrid model's log does not print), each checked
    against its declaration; a control left empty is not given (the view then reads it from the page's flags)."""
    given = body.get("log_hints") if isinstance(body, dict) else None
    if given is None:
        return {}
    if not isinstance(given, dict):
        raise RequestError('log_hints: give {"kv_cache_groups": 4, ...}', "log_hints")
    known = {h.name: h for h in LOG_HINTS}
    out: dict[str, int | str] = {}
    for name, value in given.items():
        hint = known.get(name)
        if hint is None:
            raise RequestError(f"log_hints: {str(name)[:40]!r} is not one of {', '.join(known)}", "log_hints")
        if value is None or value == "":
            continue
        if hint.choices:
            if value not in hint.choices:
                raise RequestError(f"{hint.label}: give one of {', '.join(hint.choices)}", f"hint_{name}")
            out[name] = value
            continue
        top = hint.high
        number = value if isinstance(value, int) and not isinstance(value, bool) else None
        if isinstance(value, str) and value.strip().isdigit():
            number = int(value.strip())
        if number is None or not hint.low <= number <= top:
            raise RequestError(f"{hint.label}: give a whole number from {hint.low} to {top:,}, not {str(value)[:20]!r}",
                               f"hint_{name}")
        out[name] = number
    return out


# -- the fleet view ---------------------------------------------------------------------------------

def _catalogue_models(value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise RequestError("models: give a comma list of catalogue models, e.g. qwen3.6-27b,llama-3.1-70b", "models")
    for name in (x.strip() for x in value.split(",") if x.strip()):
        if find_entry(name) is None:
            raise RequestError(f"models: {name!r} is not in the catalogue (the explorer reads no files and makes no "
                               "network requests)", "models")


def _listed(values: dict, name: str) -> None:
    """A repeatable field given as one text ('H200=3.10, H100=2.50', as a share link carries it) -> its items."""
    value = values.get(name)
    if isinstance(value, str):
        values[name] = [x.strip() for x in value.split(",") if x.strip()] or None
    if values[name] is not None and (not isinstance(values[name], list) or len(values[name]) > FLEET_LIMITS["items"]):
        raise RequestError(f"{name}: give at most {FLEET_LIMITS['items']} items, as a list of strings", name)


def _team_presets(teams: list) -> None:
    """Each team's workload is a preset name here: a workload file is a path, and the server reads no file."""
    for spec in teams:
        if not isinstance(spec, str):
            raise RequestError("team: each team is a string NAME=USERS[:PRESET]", "team")
        workload = spec.partition("=")[2].partition(":")[2].strip()
        if workload and workload not in preset_names():
            raise RequestError(f"team {spec!r}: {workload!r} is not a preset ({', '.join(preset_names())}); the explorer "
                               "reads no files, so a team's own workload file is for `servesize fleet --team`", "team")


def fleet_query(body: Any) -> FleetQuery:
    """POST /api/fleet: FleetQuery's fields by name; ``models`` only catalogue names, a team's workload only a
    preset, a workload only as uploaded content; the search bounded (``form.FLEET_LIMITS``)."""
    body = _object(body)
    _unknown(body, set(FLEET_PARAMS))
    values = {k: v for k, v in body.items() if v is not None and v != ""}
    if "models" not in values:
        raise RequestError("models is required: a comma list of catalogue models", "models")
    _catalogue_models(values["models"])
    for name in ("team", "priority", "gpu_hour_price"):
        if name in values:
            _listed(values, name)
    _team_presets(values.get("team") or [])
    if "workload" in values:
        values["workload"] = _workload(values["workload"])
    _limits(values)
    if values.get("max_gpus") is not None:
        most = FLEET_LIMITS["max_gpus"]
        if FLEET_PARAMS["max_gpus"].parse(values["max_gpus"]) > most:
            raise RequestError(f"--max-gpus {values['max_gpus']} is more than the explorer searches per request "
                               f"({most}); run `servesize fleet` for more", "max_gpus")
    try:
        return FleetQuery(**values)
    except BadInput as exc:
        raise RequestError(str(exc), field_of(exc)) from None


def teams_request(body: Any) -> tuple[dict, tuple[str, ...], tuple[str, ...]]:
    """POST /api/teams: the plan view's request with ``team`` (NAME=USERS[:PRESET], a list or one comma text) and
    ``priority`` (NAME=LEVEL); the rest is read by ``scenario_of``."""
    body = _object(body)
    values = {"team": body.get("team"), "priority": body.get("priority")}
    if values["team"] is None or values["team"] == "":
        raise RequestError("team: give each team as NAME=USERS[:PRESET], e.g. agents=100:coding-agent", "team")
    for name in ("team", "priority"):
        if values[name] is not None and values[name] != "":
            _listed(values, name)
        else:
            values[name] = None
    _team_presets(values["team"] or [])
    rest = {k: v for k, v in body.items() if k not in ("team", "priority")}
    return rest, tuple(values["team"] or ()), tuple(values["priority"] or ())
