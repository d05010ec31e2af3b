"""servesize serve: the explorer, a local web page over the same library the commands call."""

from __future__ import annotations

import argparse
import sys

from servesize.errors import BadInput

HELP = "the explorer: a local web page (what fits, and one deployment's plan), on 127.0.0.1"
EPILOG = """\
examples:
  servesize serve                  http://127.0.0.1:8765/ (loopback only)
  servesize serve --port 0 --open  a free port, printed, and the page opened in your browser

The page computes nothing itself: every number comes from the same functions as `servesize fit`
and `servesize plan` (its JSON API, POST /api/plan, /api/fit, /api/memory, takes the Scenario's fields).
It reads no file a client names and makes no request outside its own origin; an uploaded
config.json, workload or vLLM log is parsed in memory and never stored. Ctrl-C stops it.
"""

DEFAULT_PORT = 8765


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only; anything else exposes the "
                             "page to your network)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, metavar="N",
                        help=f"port (default {DEFAULT_PORT}; 0 picks a free one and prints it)")
    parser.add_argument("--open", action="store_true", help="open the page in the default browser")


def run(args) -> int:
    from servesize.web.app import LOOPBACK, serve

    if not 0 <= args.port <= 65535:
        raise BadInput(f"--port {args.port} is not a port number (0-65535; 0 picks a free one)")
    if args.host not in LOOPBACK:
        print(f"servesize: listening on {args.host}: anyone who can reach it can use the page", file=sys.stderr)

    def announce(url: str) -> None:
        print(f"servesize explorer: {url}  (Ctrl-C stops it)", flush=True)

    def opened(url: str) -> None:
        import webbrowser

        webbrowser.open(url)

    try:
        serve(args.host, args.port, announce, opened if args.open else None)
    except OSError as exc:
        raise BadInput(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    return 0
