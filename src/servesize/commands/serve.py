"""servesize serve: the explorer, a local web page over the same library the commands call."""

from __future__ import annotations

import argparse
import sys

from servesize.commands._types import whole
from servesize.errors import BadInput

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
    parser.add_argument("--port", type=whole(0, 65535), default=DEFAULT_PORT, metavar="N",
                        help=f"port (default {DEFAULT_PORT}; 0 picks a free one and prints it)")
    parser.add_argument("--open", action="store_true", help="open the page in the default browser")


def run(args) -> int:
    from servesize.web.app import LOOPBACK, serve

    check_host(args.host)

    def announce(url: str) -> None:  # only once the socket is bound: nothing says "listening" before it is
        if args.host not in LOOPBACK:
            print(f"servesize: listening on {args.host}: anyone who can reach it can use the page", file=sys.stderr)
        print(f"servesize explorer: {url}  (Ctrl-C stops it)", flush=True)

    def opened(url: str) -> None:
        import webbrowser

        webbrowser.open(url)

    try:
        serve(args.host, args.port, announce, opened if args.open else None)
    except (OSError, UnicodeError) as exc:  # UnicodeError: a name the resolver cannot encode
        raise BadInput(f"cannot listen on {args.host[:80]}:{args.port}: {getattr(exc, 'strerror', None) or exc}") from None
    return 0


MAX_HOST_CHARS = 253  # a DNS name's most (RFC 1035); each dot-separated label at most 63


def check_host(host: str) -> None:
    """--host: an address or a host name the resolver can take, else one line (a 300-character name was a
    UnicodeError from the IDNA codec)."""
    shown = host if len(host) <= 80 else host[:77] + "..."
    if not host or len(host) > MAX_HOST_CHARS or any(len(label) > 63 for label in host.split(".")):
        raise BadInput(f"--host {shown!r} is not an address or host name (at most {MAX_HOST_CHARS} characters, "
                       "63 between dots)")
    try:
        host.encode("idna")
    except UnicodeError:
        raise BadInput(f"--host {shown!r} is not a host name servesize can look up") from None
