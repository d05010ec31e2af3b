"""The explorer's aiohttp application: the page's assets and the JSON API (``handlers``).

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
    GET  /api/progress/JOB    where a long request (fleet, frontier) is: the library's last stage and the seconds
                              since it began (the page names the request in its X-Servesize-Job header)
    POST /api/method          the method section (every derivation step: formula, figures, value) and the FAQ
    POST /api/fleet           the cheapest fleet for N users or several teams (``servesize fleet --json``), drawn
    POST /api/teams           several teams on the plan's deployment (``servesize.teams``): shared, alone, split
    POST /api/calibrate       a pasted vLLM start-up log -> its calibration, beside the prediction
    POST /api/record          an uploaded ``servesize measure`` record -> what it measured, beside it

A refusal is HTTP 400 ``{"error": message, "field": name}``. Work is bounded per request (fills and
draws capped, a comma list's work by its distinct items, a form's body at ``server.FORM_BODY_BYTES``, a pasted log's
or record's at ``MAX_BODY_BYTES``, parsed off the event loop); no endpoint reads a file a client names or
makes a network request (while a request is computed every reader refuses a path before touching it:
``limits.files_forbidden``). A POST is executed only as application/json from the explorer's own page
(no Origin, or its own): another page the browser visits gets 403, a text/plain or form POST 415, and so does a
body with a Content-Encoding (the page never sends one). A malformed request is answered 400 and gets at most one
line in the terminal (``OneLine``); only a bug in servesize prints a traceback there.
The numbers are computed in worker threads: the verdict on its own worker, the charts and panels on
another, a fleet search on a third, a pasted log or record on a fourth, so neither a chart nor an
upload delays a verdict; a chart or upload whose page has gone away (the client closed the request)
is not computed at all. The handlers (and with them the engine) are imported on the first API
request, so the page itself is served at once.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import traceback
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from importlib import resources

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from servesize.errors import ServesizeError, excerpt
from servesize.limits import files_forbidden
from servesize.web.server import (
    FAST,
    FLEET,
    HEAVY,
    HOSTS,
    JOBS,
    MAX_BODY_BYTES,
    NO_FILES,
    UPLOADS,
    BodyTooLarge,
    Jobs,
    json_response,
)

STATIC = "static"
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
       "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
       "frame-ancestors 'none'")


def static_text(name: str) -> bytes:
    return resources.files("servesize.web").joinpath(STATIC, name).read_bytes()


# -- middleware: errors as JSON, the Host check, the security headers ---------------------------------

def _hostname(host: str) -> str:
    """'127.0.0.1:8765' -> '127.0.0.1'; '[::1]:8765' -> '[::1]'."""
    if host.startswith("["):
        return host.split("]")[0] + "]"
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def foreign(request: web.Request) -> str | None:
    """Why a POST is not the explorer's own page's, or None. A page elsewhere can make the browser POST to
    127.0.0.1 (a 'simple' request: text/plain or a form, no preflight), so only application/json is executed,
    and only with no Origin or this server's own (browsers send one on every cross-origin POST)."""
    origin = request.headers.get("Origin")
    if origin is not None and origin != f"{request.scheme}://{request.host}":
        return f"a page at {origin[:80]!r} may not use this explorer (only its own page at {request.host!r} may)"
    if request.headers.get("Sec-Fetch-Site", "same-origin") not in ("same-origin", "none"):
        return "a request from another site may not use this explorer"
    return None


@web.middleware
async def guard(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
    hosts = request.app[HOSTS]
    if hosts and _hostname(request.host or "") not in hosts:
        return json_response({"error": f"this explorer answers only to {', '.join(hosts)} (Host {request.host!r} "
                                       "refused)", "field": None}, 403)
    if request.method not in ("GET", "HEAD"):
        why = foreign(request)
        if why is not None:
            return json_response({"error": why, "field": None}, 403)
        if request.content_type != "application/json":
            return json_response({"error": f"the explorer's API takes application/json, not "
                                           f"{request.content_type[:60]!r}", "field": None}, 415)
        encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding != "identity":  # the page never compresses a body; aiohttp would inflate one when it is read
            return json_response({"error": f"the explorer's API takes a body as sent, not one with Content-Encoding "
                                           f"{encoding[:40]!r}", "field": None}, 415)
    try:
        with files_forbidden(NO_FILES):
            response = await handler(request)
    except (web.HTTPRequestEntityTooLarge, BodyTooLarge) as exc:
        limit = exc.limit if isinstance(exc, BodyTooLarge) else MAX_BODY_BYTES
        taken = "" if limit == MAX_BODY_BYTES else f" (a pasted log or record may be up to {MAX_BODY_BYTES >> 20} MiB)"
        response = json_response({"error": f"the request is larger than {limit >> 20} MiB{taken}; use the command "
                                          "line for larger files", "field": None}, 413)
    except web.HTTPException as exc:
        response = json_response({"error": exc.reason, "field": None}, exc.status)
    except (RequestPayloadError, ConnectionResetError) as exc:  # the client went away mid-body, or sent one unreadable
        response = json_response({"error": f"the request's body could not be read: {excerpt(exc)}", "field": None}, 400)
    except ServesizeError as exc:
        from servesize.web.requests import refusal

        response = json_response(refusal(exc), 400)
    except Exception as exc:  # a bug: one line to the page, the traceback to the terminal that started it
        traceback.print_exc(file=sys.stderr)
        response = json_response({"error": f"bug: {type(exc).__name__}: {exc} (servesize's fault, not your input's; the "
                                          "traceback is in the terminal running servesize serve; please report it)",
                                  "field": None}, 500)
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["Cache-Control"] = "no-cache"
    return response


async def index(request: web.Request) -> web.Response:
    return web.Response(body=static_text("index.html"), content_type="text/html", charset="utf-8")


def _lazy(name: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """A route whose handler (and the engine behind it) is imported when it is first asked for."""

    async def handle(request: web.Request) -> web.StreamResponse:
        from servesize.web import handlers

        return await getattr(handlers, name)(request)

    handle.__name__ = name
    return handle


ROUTES = (("GET", "/api/catalogue", "get_catalogue"), ("POST", "/api/plan", "post_plan"),
          ("POST", "/api/explain", "post_explain"), ("POST", "/api/memory", "post_memory"),
          ("POST", "/api/fit", "post_fit"), ("POST", "/api/fit/cell", "post_fit_cell"),
          ("POST", "/api/fit/matrix", "post_fit_matrix"), ("POST", "/api/sensitivity", "post_sensitivity"),
          ("POST", "/api/charts/{name}", "post_chart"), ("POST", "/api/frontier", "post_frontier"),
          ("POST", "/api/calibrate", "post_calibrate"), ("POST", "/api/record", "post_record"),
          ("POST", "/api/fleet", "post_fleet"), ("POST", "/api/teams", "post_teams"),
          ("POST", "/api/value", "post_value"), ("POST", "/api/method", "post_method"),
          ("POST", "/api/engine-check", "post_engine_check"),
          ("POST", "/api/disaggregated", "post_disaggregated"), ("GET", "/api/progress/{job}", "get_progress"))


def make_app(*, hosts: tuple[str, ...] = LOOPBACK) -> web.Application:
    """The application; ``hosts``: the Host names it answers to (empty: any, for a non-loopback bind)."""
    app = web.Application(middlewares=[guard], client_max_size=MAX_BODY_BYTES)
    app[FAST] = ThreadPoolExecutor(max_workers=2, thread_name_prefix="servesize-verdict")
    app[HEAVY] = ThreadPoolExecutor(max_workers=1, thread_name_prefix="servesize-charts")
    app[FLEET] = ThreadPoolExecutor(max_workers=1, thread_name_prefix="servesize-fleet")
    app[UPLOADS] = ThreadPoolExecutor(max_workers=1, thread_name_prefix="servesize-uploads")
    app[HOSTS] = hosts
    app[JOBS] = Jobs()
    app.router.add_get("/", index)
    app.router.add_static("/static/", str(resources.files("servesize.web").joinpath(STATIC)), show_index=False,
                          follow_symlinks=False)
    for method, path, name in ROUTES:
        app.router.add_route(method, path, _lazy(name))

    async def shutdown(app: web.Application) -> None:
        for key in (FAST, HEAVY, FLEET, UPLOADS):
            app[key].shutdown(wait=False, cancel_futures=True)

    app.on_cleanup.append(shutdown)
    return app


def _warm() -> None:
    """Import the engine and build the catalogue while the browser loads the page."""
    from servesize.web.handlers import catalogue

    catalogue()


# -- serving -------------------------------------------------------------------------------------------

class OneLine(logging.Handler):
    """aiohttp's own server log (a request that is not HTTP, a missing Host, a client gone mid-answer): one line on
    stderr naming what happened, never a traceback; a bug in servesize's handlers is the guard's, which keeps one."""

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else None
        what = record.getMessage()
        if isinstance(exc, (HttpProcessingError, RequestPayloadError)):  # the client's request, not servesize
            what = "a request that is not well-formed HTTP was refused"
        detail = f": {type(exc).__name__}: {excerpt(exc)}" if exc is not None else ""
        try:
            sys.stderr.write(f"servesize explorer: {what}{detail}\n")
        except (OSError, ValueError):  # a closed terminal: nothing to tell
            pass


def server_log() -> logging.Logger:
    logger = logging.getLogger("servesize.explorer")
    if not any(isinstance(h, OneLine) for h in logger.handlers):
        logger.addHandler(OneLine())
    logger.propagate = False
    return logger


async def _serve(host: str, port: int, announce: Callable[[str], None], opened: Callable[[str], None] | None) -> None:
    hosts = LOOPBACK + ((host,) if host not in LOOPBACK else ()) if host not in ("0.0.0.0", "::", "") else ()
    runner = web.AppRunner(make_app(hosts=hosts), access_log=None, logger=server_log())
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
    loop.run_in_executor(None, _warm)
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
