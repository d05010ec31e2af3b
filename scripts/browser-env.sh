#!/usr/bin/env bash
# Make sure the browser the explorer's tests drive is here: Debian's chromium package (tests/web,
# marker `browser`). Idempotent: when /usr/bin/chromium exists it only prints its version. It never
# downloads a browser of its own (no `playwright install`): Playwright drives this one.
#
#   scripts/browser-env.sh
#
# Environment:
#   CHROMIUM   the browser the tests use (default /usr/bin/chromium; the tests look there)
#
# Needs: apt-get and root (or sudo) the first time, on Debian or Ubuntu. Elsewhere it says what to
# install and exits 0, and the browser tests skip, saying that the browser is absent.
set -euo pipefail

CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"

version() { "$CHROMIUM" --version 2>/dev/null | head -n 1 || true; }

if [[ -x "$CHROMIUM" ]]; then
    echo "$(version) ($CHROMIUM)"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "browser-env: no $CHROMIUM and no apt-get: install Chromium from your system's packages" \
         "(the browser tests skip until $CHROMIUM exists)" >&2
    exit 0
fi

as_root=()
if [[ "$(id -u)" != "0" ]]; then
    if command -v sudo >/dev/null 2>&1; then
        as_root=(sudo)
    else
        echo "browser-env: installing chromium needs root: run 'apt-get install -y chromium' as root" >&2
        exit 1
    fi
fi

echo "browser-env: installing Debian's chromium (about 290 MB, once)" >&2
"${as_root[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq chromium >/dev/null
if [[ ! -x "$CHROMIUM" ]]; then
    echo "browser-env: apt-get installed chromium, but $CHROMIUM is not there" >&2
    exit 1
fi
echo "$(version) ($CHROMIUM)"
