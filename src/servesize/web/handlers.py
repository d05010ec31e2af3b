"""The explorer's API handlers: request JSON -> a Scenario (``requests``) -> the library -> a view
(``views``, ``charts``) -> JSON. The verdict runs on the FAST worker, the charts and panels on HEAVY, a pasted
log or record on UPLOADS (so an upload never holds up a verdict)."""

from __future__ import annotations

from functools import lru_cache, partial

from aiohttp import web

import servesize.api as api
from servesize import __version__
from servesize.errors import ServesizeError
from servesize.model.hardware import load_gpus
from servesize.web import charts, fleet_view, method, views
from servesize.web.form import START, VIEW_PARAMS, form, presets, read_value
from servesize.web.glossary import glossary
from servesize.web.requests import (
    RequestError,
    fit_query,
    fleet_query,
    log_hints,
    plan_request,
    refusal,
    scenario_of,
    teams_request,
    text_field,
)
from servesize.web.server import FAST, FLEET, HEAVY, JOBS, UPLOADS, compute, in_worker, json_response, read_body, start_job


@lru_cache(maxsize=1)
def catalogue() -> dict:
    """GET /api/catalogue: everything the page draws its form and tables from."""
    gpus = []
    for key, g in load_gpus().items():
        gpus.append({"key": key, "name": g.name, "vendor": g.vendor, "memory_mib": g.memory_mib,
                     "memory_text": f"{g.memory_mib:,} MiB ({g.memory_bytes / 2**30:,.1f} GiB)",
                     "bandwidth_gbps": g.bandwidth_gbps, "fp8": g.fp8, "fp4": g.fp4, "tdp_w": g.tdp_w,
                     "source": g.source})
    return views.finite({"version": __version__, "form": form(list(load_gpus())), "presets": presets(), "start": START,
                         "models": views.models_view(), "gpus": gpus, "glossary": glossary()})


# -- handlers ----------------------------------------------------------------------------------------

async def get_catalogue(request: web.Request) -> web.Response:
    return await compute(request, FAST, catalogue)


async def post_value(request: web.Request) -> web.Response:
    """A control's text as the field's declaration reads it ('45k' -> 45000): where a slider's thumb goes.
    Answered here, not on a worker: one bounded parse must not queue behind a verdict."""
    body = await read_body(request)
    if not isinstance(body, dict):
        raise RequestError('give {"view": "plan", "field": "median", "text": "45k"}', None)
    return json_response(read_value(body.get("view"), body.get("field"), body.get("text")))


async def post_plan(request: web.Request) -> web.Response:
    body = await read_body(request)
    try:
        req = plan_request(body)
        return await compute(request, FAST, partial(views.plan_view, req))
    except ServesizeError as exc:
        field = refusal(exc)["field"]
        document = await in_worker(request, FAST, views.refused_plan, body, exc, field)
        return json_response(document, 400)


async def post_explain(request: web.Request) -> web.Response:
    req = plan_request(await read_body(request))
    return await compute(request, FAST, partial(views.explain_view, req))


async def post_memory(request: web.Request) -> web.Response:
    scenario, _ = scenario_of(await read_body(request))

    def work() -> dict:
        report = api.memory(scenario)
        return views.finite({"memory": report.to_dict(), "bar": views.memory_bar(report)})

    return await compute(request, FAST, work)


async def post_fit(request: web.Request) -> web.Response:
    query = fit_query(await read_body(request))
    return await compute(request, FAST, partial(views.fit_view, query))


async def post_fit_cell(request: web.Request) -> web.Response:
    body = await read_body(request)
    if not isinstance(body, dict) or "row" not in body:
        raise RequestError("give the query and the row: {\"query\": {...}, \"row\": {...}}", "row")
    query = fit_query(body.get("query"))
    return await compute(request, FAST, partial(views.cell_derivation, query, body["row"]))


async def post_fit_matrix(request: web.Request) -> web.Response:
    body = await read_body(request)
    if not isinstance(body, dict) or not isinstance(body.get("gpu"), str):
        raise RequestError("give the query and one GPU type: {\"query\": {...}, \"gpu\": \"H100\"}", "gpu")
    query = fit_query(body.get("query"))
    return await compute(request, HEAVY, partial(charts.fit_matrix_column, query, body["gpu"]))


_CHARTS = {"decode": charts.decode_chart, "scaling": charts.scaling_chart, "batch": charts.batch_chart}


async def post_chart(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    req = plan_request(await read_body(request))
    if name == "miss":
        return await compute(request, HEAVY, partial(charts.miss_chart, req.scenario, req.load.load_users))
    if name not in _CHARTS:
        raise web.HTTPNotFound(reason=f"no chart {name!r}; charts: decode, miss, scaling, batch")
    return await compute(request, HEAVY, partial(_CHARTS[name], req.scenario))


async def post_sensitivity(request: web.Request) -> web.Response:
    req = plan_request(await read_body(request))
    return await compute(request, HEAVY, partial(charts.sensitivity_panel, req.scenario))


async def post_frontier(request: web.Request) -> web.Response:
    req = plan_request(await read_body(request))
    job = start_job(request)
    return await compute(request, HEAVY, partial(charts.frontier, req.scenario, progress=job.say), job)


async def post_engine_check(request: web.Request) -> web.Response:
    req = plan_request(await read_body(request))
    job = start_job(request)
    return await compute(request, FLEET, partial(views.engine_check_view, req, progress=job.say), job)


async def post_disaggregated(request: web.Request) -> web.Response:
    req = plan_request(await read_body(request))
    job = start_job(request)
    return await compute(request, FLEET, partial(views.disaggregated_view, req, progress=job.say), job)


async def get_progress(request: web.Request) -> web.Response:
    """Where a long request named JOB is: the stage the library last reported and the seconds it has run."""
    job = request.app[JOBS].get(request.match_info["job"])
    if job is None:
        return json_response({"error": "no such request (it has not started, or it is long done)", "field": None}, 404)
    return json_response(job.to_dict())


async def post_method(request: web.Request) -> web.Response:
    req = plan_request(await read_body(request))
    return await compute(request, HEAVY, partial(method.method_view, req))


_PAGE_FIELDS = (*VIEW_PARAMS, "draft")  # the page sends its whole state; a panel reads the Scenario from it


async def post_calibrate(request: web.Request) -> web.Response:
    body = await read_body(request, upload=True)
    log = text_field(body, "vllm_log", "a vLLM start-up log")
    hints = log_hints(body)
    scenario, _ = scenario_of({k: v for k, v in body.items() if k not in ("vllm_log", "log_hints")}, extra=_PAGE_FIELDS)
    return await compute(request, UPLOADS, partial(views.calibrate_view, scenario, log, hints))


async def post_record(request: web.Request) -> web.Response:
    body = await read_body(request, upload=True)
    record = text_field(body, "record", "a servesize measure run record (the .jsonl file)")
    scenario, _ = scenario_of({k: v for k, v in body.items() if k != "record"}, extra=_PAGE_FIELDS)
    return await compute(request, UPLOADS, partial(views.record_view, scenario, record))


async def post_fleet(request: web.Request) -> web.Response:
    query = fleet_query(await read_body(request))
    job = start_job(request)
    return await compute(request, FLEET, partial(fleet_view.fleet_view, query, progress=job.say), job)


async def post_teams(request: web.Request) -> web.Response:
    rest, team, priority = teams_request(await read_body(request))
    scenario, _ = scenario_of(rest, extra=_PAGE_FIELDS)
    return await compute(request, HEAVY, partial(fleet_view.teams_view, scenario, team, priority))
