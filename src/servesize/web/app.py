"""The explorer's aiohttp application: the JSON API and the page's assets.

    GET  /                    the page (static/index.html); /static/* its script and style
    GET  /api/catalogue       the form (the Scenario's declaration), the models, the GPUs, the presets
    POST /api/plan            the verdict, tiles, memory bar, recipe, bill, hypotheses (``views.plan_view``)
    POST /api/explain         every number's derivation, by section (what --explain prints), fetched on demand
    POST /api/memory          vLLM's memory budget and pool (``servesize memory --json``) and the bar
    POST /api/fit             what fits (``servesize fit --json``), with the row texts
    POST /api/fit/cell        the derivation behind one fit row
    POST /api/fit/matrix      one GPU type's column of the what-fits matrix
    POST /api/sensitivity     where each assumption flips the verdict (the heavy part of ``plan``)
    POST /api/charts/NAME     decode | miss | scaling | batch: one chart's series
    POST /api/frontier        every catalogue model x split on these GPUs, ranked
    POST /api/calibrate       a pasted vLLM start-up log -> its calibration, beside the prediction
    POST /api/record          an uploaded ``servesize measure`` record -> what it measured, beside it

A refusal is HTTP 400 ``{"error": message, "field": name}``. Work is bounded per request (fills and
draws capped, the body at ``form.MAX_BODY_BYTES``); no endpoint reads a file a client names or
makes a network request. The numbers are computed in worker threads: the verdict on its own
worker, the charts and panels on another, so a chart never delays a verdict; a chart whose page
has gone away (the client closed the request) is not computed at all.
"""

from __future__ import annotations

import asyncio
import json
import sys
import traceback
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache, partial
from importlib import resources
from typing import Any

from aiohttp import web

import servesize.api as api
from servesize import __version__
from servesize.errors import ServesizeError
from servesize.model.hardware import load_gpus
from servesize.web import charts, views
from servesize.web.form import MAX_BODY_BYTES, START, VIEW_PARAMS, form, presets
from servesize.web.requests import RequestError, fit_query, plan_request, refusal, scenario_of, text_field

STATIC = "static"
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
       "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
       "frame-ancestors 'none'")

FAST: web.AppKey[ThreadPoolExecutor] = web.AppKey("fast", ThreadPoolExecutor)
HEAVY: web.AppKey[ThreadPoolExecutor] = web.AppKey("heavy", ThreadPoolExecutor)
HOSTS: web.AppKey[tuple[str, ...]] = web.AppKey("hosts", tuple)


def static_text(name: str) -> bytes:
    return resources.files("servesize.web").joinpath(STATIC, name).read_bytes()


@lru_cache(maxsize=1)
def catalogue() -> dict:
    """GET /api/catalogue: everything the page draws its form and tables from."""
    gpus = []
    for key, g in load_gpus().items():
        gpus.append({"key": key, "name": g.name, "vendor": g.vendor, "memory_mib": g.memory_mib,
                     "memory_text": f"{g.memory_mib:,} MiB ({g.memory_bytes / 2**30:,.1f} GiB)",
                     "bandwidth_gbps": g.bandwidth_gbps, "fp8": g.fp8, "fp4": g.fp4, "tdp_w": g.tdp_w,
                     "source": g.source})
    return views.finite({"version": __version__, "form": form(), "presets": presets(), "start": START,
                         "models": views.models_view(), "gpus": gpus})


# -- middleware: errors as JSON, the Host check, the security headers ---------------------------------

def _json(data: Any, status: int = 200) -> web.Response:
    text = json.dumps(data, allow_nan=False, separators=(",", ":"))
    return web.Response(text=text, status=status, content_type="application/json")


def _hostname(host: str) -> str:
    """'127.0.0.1:8765' -> '127.0.0.1'; '[::1]:8765' -> '[::1]'."""
    if host.startswith("["):
        return host.split("]")[0] + "]"
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


@web.middleware
async def guard(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
    hosts = request.app[HOSTS]
    if hosts and _hostname(request.host or "") not in hosts:
        return _json({"error": f"this explorer answers only to {', '.join(hosts)} (Host {request.host!r} refused)",
                      "field": None}, 403)
    try:
        response = await handler(request)
    except web.HTTPRequestEntityTooLarge:
        response = _json({"error": f"the request is larger than {MAX_BODY_BYTES // 2**20} MiB; use the command line "
                                   "for larger files", "field": None}, 413)
    except web.HTTPException as exc:
        response = _json({"error": exc.reason, "field": None}, exc.status)
    except ServesizeError as exc:
        response = _json(refusal(exc), 400)
    except Exception as exc:  # a bug: one line to the page, the traceback to the terminal that started it
        traceback.print_exc(file=sys.stderr)
        response = _json({"error": f"internal error: {type(exc).__name__}: {exc} (a bug; the traceback is in the "
                                   "terminal running servesize serve; please report it)", "field": None}, 500)
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["Cache-Control"] = "no-cache"
    return response


async def _body(request: web.Request) -> Any:
    try:
        text = await request.text()
    except UnicodeDecodeError:
        raise RequestError("the request body is not UTF-8 text") from None
    try:
        return json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise RequestError(f"the request body is not JSON: {exc.msg} (line {exc.lineno})") from None


async def _compute(request: web.Request, pool: web.AppKey, work: Callable[[], Any]) -> web.Response:
    """Run ``work`` on a worker thread; a heavy request whose client has gone is skipped."""
    loop = asyncio.get_running_loop()

    def gone() -> bool:
        transport = request.transport
        return transport is None or transport.is_closing()

    def run() -> Any:
        if pool is HEAVY and gone():
            return None
        return work()

    result = await loop.run_in_executor(request.app[pool], run)
    return _json(result if result is not None else {"skipped": True})


# -- handlers ----------------------------------------------------------------------------------------

async def index(request: web.Request) -> web.Response:
    return web.Response(body=static_text("index.html"), content_type="text/html", charset="utf-8")


async def get_catalogue(request: web.Request) -> web.Response:
    return await _compute(request, FAST, catalogue)


async def post_plan(request: web.Request) -> web.Response:
    body = await _body(request)
    try:
        req = plan_request(body)
        return await _compute(request, FAST, partial(views.plan_view, req))
    except ServesizeError as exc:
        field = refusal(exc)["field"]
        loop = asyncio.get_running_loop()
        document = await loop.run_in_executor(request.app[FAST], views.refused_plan, body, exc, field)
        return _json(document, 400)


async def post_explain(request: web.Request) -> web.Response:
    req = plan_request(await _body(request))
    return await _compute(request, FAST, partial(views.explain_view, req))


async def post_memory(request: web.Request) -> web.Response:
    scenario, _ = scenario_of(await _body(request))

    def work() -> dict:
        report = api.memory(scenario)
        return views.finite({"memory": report.to_dict(), "bar": views.memory_bar(report)})

    return await _compute(request, FAST, work)


async def post_fit(request: web.Request) -> web.Response:
    query = fit_query(await _body(request))
    return await _compute(request, FAST, partial(views.fit_view, query))


async def post_fit_cell(request: web.Request) -> web.Response:
    body = await _body(request)
    if not isinstance(body, dict) or "row" not in body:
        raise RequestError("give the query and the row: {\"query\": {...}, \"row\": {...}}", "row")
    query = fit_query(body.get("query"))
    return await _compute(request, FAST, partial(views.cell_derivation, query, body["row"]))


async def post_fit_matrix(request: web.Request) -> web.Response:
    body = await _body(request)
    if not isinstance(body, dict) or not isinstance(body.get("gpu"), str):
        raise RequestError("give the query and one GPU type: {\"query\": {...}, \"gpu\": \"H100\"}", "gpu")
    query = fit_query(body.get("query"))
    return await _compute(request, HEAVY, partial(charts.fit_matrix_column, query, body["gpu"]))


_CHARTS = {"decode": charts.decode_chart, "scaling": charts.scaling_chart, "batch": charts.batch_chart}


async def post_chart(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    req = plan_request(await _body(request))
    if name == "miss":
        return await _compute(request, HEAVY, partial(charts.miss_chart, req.scenario, req.load.users))
    if name not in _CHARTS:
        raise web.HTTPNotFound(reason=f"no chart {name!r}; charts: decode, miss, scaling, batch")
    return await _compute(request, HEAVY, partial(_CHARTS[name], req.scenario))


async def post_sensitivity(request: web.Request) -> web.Response:
    req = plan_request(await _body(request))
    return await _compute(request, HEAVY, partial(charts.sensitivity_panel, req.scenario))


async def post_frontier(request: web.Request) -> web.Response:
    req = plan_request(await _body(request))
    return await _compute(request, HEAVY, partial(charts.frontier, req.scenario))


_PAGE_FIELDS = (*VIEW_PARAMS, "draft")  # the page sends its whole state; a panel reads the Scenario from it


async def post_calibrate(request: web.Request) -> web.Response:
    body = await _body(request)
    log = text_field(body, "vllm_log", "a vLLM start-up log")
    scenario, _ = scenario_of({k: v for k, v in body.items() if k != "vllm_log"}, extra=_PAGE_FIELDS)
    return await _compute(request, FAST, partial(views.calibrate_view, scenario, log))


async def post_record(request: web.Request) -> web.Response:
    body = await _body(request)
    record = text_field(body, "record", "a servesize measure run record (the .jsonl file)")
    scenario, _ = scenario_of({k: v for k, v in body.items() if k != "record"}, extra=_PAGE_FIELDS)
    return await _compute(request, FAST, partial(views.record_view, scenario, record))


def make_app(*, hosts: tuple[str, ...] = LOOPBACK) -> web.Application:
    """The application; ``hosts``: the Host names it answers to (empty: any, for a non-loopback bind)."""
    app = web.Application(middlewares=[guard], client_max_size=MAX_BODY_BYTES)
    app[FAST] = ThreadPoolExecutor(max_workers=2, thread_name_prefix="servesize-verdict")
    app[HEAVY] = ThreadPoolExecutor(max_workers=1, thread_name_prefix="servesize-charts")
    app[HOSTS] = hosts
    app.router.add_get("/", index)
    app.router.add_static("/static/", str(resources.files("servesize.web").joinpath(STATIC)), show_index=False,
                          follow_symlinks=False)
    app.router.add_get("/api/catalogue", get_catalogue)
    app.router.add_post("/api/plan", post_plan)
    app.router.add_post("/api/explain", post_explain)
    app.router.add_post("/api/memory", post_memory)
    app.router.add_post("/api/fit", post_fit)
    app.router.add_post("/api/fit/cell", post_fit_cell)
    app.router.add_post("/api/fit/matrix", post_fit_matrix)
    app.router.add_post("/api/sensitivity", post_sensitivity)
    app.router.add_post("/api/charts/{name}", post_chart)
    app.router.add_post("/api/frontier", post_frontier)
    app.router.add_post("/api/calibrate", post_calibrate)
    app.router.add_post("/api/record", post_record)

    async def shutdown(app: web.Application) -> None:
        for key in (FAST, HEAVY):
            app[key].shutdown(wait=False, cancel_futures=True)

    app.on_cleanup.append(shutdown)
    return app


# -- serving -------------------------------------------------------------------------------------------

async def _serve(host: str, port: int, announce: Callable[[str], None], opened: Callable[[str], None] | None) -> None:
    hosts = LOOPBACK + ((host,) if host not in LOOPBACK else ()) if host not in ("0.0.0.0", "::", "") else ()
    runner = web.AppRunner(make_app(hosts=hosts), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    server = getattr(site, "_server", None)
    sockets = getattr(server, "sockets", None) or []
    bound = sockets[0].getsockname()[1] if sockets else port
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}/"
    announce(url)
    loop = asyncio.get_running_loop()
    loop.run_in_executor(None, catalogue)  # warm the catalogue while the browser opens
    if opened is not None:
        opened(url)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def serve(host: str, port: int, announce: Callable[[str], None], opened: Callable[[str], None] | None = None) -> None:
    """Serve until interrupted; ``announce(url)`` hears the address once it is listening."""
    try:
        asyncio.run(_serve(host, port, announce, opened))
    except KeyboardInterrupt:
        pass
