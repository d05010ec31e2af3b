"""Time the explorer: `servesize serve` start to first page, POST /api/plan, a slider move to the
updated verdict in the browser, and the fleet view's searches (POST /api/fleet, POST /api/teams).

    python benchmarks/bench_web.py [--starts 5] [--requests 60] [--moves 40] [--no-browser]
                                   [--fleet-requests 10] [--fleet-only]

Measured, not asserted. Targets (docs/benchmarks.md, issue 8): a slider change to the updated verdict
<= 150 ms p95 in the browser; POST /api/plan <= 50 ms p95 without the sensitivity panel; serve start to
first page <= 1 s.

- start: a fresh `python -m servesize serve --port 0` each time, from spawning the process to the
  first 200 of GET / (polled every 5 ms), and to the first 200 of GET /api/catalogue (the form);
- plan: POST /api/plan for the reference scenario with a different user median each time (so the
  server's memo of recent plans never answers), one at a time, from this process (urllib); and the
  draft body a dragged slider sends (``"draft": true``, fewer fills) the same way;
- slider: Debian's headless Chromium (Playwright, /usr/bin/chromium) presses ArrowRight on the
  median slider; the page records, for each full answer, the time from the control's change event to
  the verdict drawn (``window.servesize.timings``), and this script the time from the key press to
  the page settled as seen from outside (Playwright's own round trips included);
- fleet: POST /api/fleet for the fleet view's start (qwen3.6-27b over every GPU with a price, up to 64
  GPUs: the catalogue search), at 400-ish and 500-ish users, with a different user count each time
  (so the server's memo of recent searches never answers), one at a time; the three-team query of
  docs/fleet.md the same way (a different research team size each time); and POST /api/teams, two teams on 2xH200 (the plan view's panel).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

REFERENCE = {"model": "qwen3.6-27b", "gpus": "1xH200", "quantization": "fp8", "kv_cache_dtype": "fp8"}
SETTLED = """() => { const v = document.querySelector('#verdict'), app = window.servesize;
  return app && v.dataset.pending === 'false' && +v.dataset.seq === app.planSeq && v.dataset.state === 'full'; }"""


def start() -> tuple[subprocess.Popen, str, float]:
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "servesize", "serve", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, cwd=tempfile.gettempdir())
    line = proc.stdout.readline()
    url = re.search(r"http://\S+?/", line).group(0)
    return proc, url, t0


def wait_ok(url: str, deadline_s: float = 30.0) -> float:
    end = time.perf_counter() + deadline_s
    while time.perf_counter() < end:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    r.read()
                    return time.perf_counter()
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(0.005)
    raise SystemExit(f"{url} never answered")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def bench_start(n: int) -> dict:
    page, form = [], []
    for _ in range(n):
        proc, url, t0 = start()
        try:
            page.append(wait_ok(url) - t0)
            form.append(wait_ok(url + "api/catalogue") - t0)
        finally:
            stop(proc)
    return {"first_page_s": page, "catalogue_s": form}


def post(url: str, body: dict) -> float:
    data = json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=60) as r:
        r.read()
    return time.perf_counter() - t0


def bench_plan(url: str, n: int) -> dict:
    post(url + "api/plan", REFERENCE)  # the first plan pays the imports and the catalogue
    fresh = [post(url + "api/plan", {**REFERENCE, "median": 20_000 + 137 * i}) for i in range(n)]
    memo = [post(url + "api/plan", REFERENCE) for _ in range(min(n, 20))]
    # the two bodies a slider move sends: the draft while dragging, then the full answer when let go
    draft = [post(url + "api/plan", {**REFERENCE, "median": 50_000 + 137 * i, "draft": True}) for i in range(n)]
    return {"fresh_s": fresh, "memoised_s": memo, "draft_s": draft}


FLEET_START = {"models": "qwen3.6-27b"}
FLEET_TEAMS = {"models": "qwen3.6-27b", "gpus_from": "H200-SXM,L40S"}
DEPLOYMENT = {"model": "qwen3.6-27b", "gpus": "2xH200", "data_parallel_size": 2, "quantization": "fp8",
              "kv_cache_dtype": "fp8"}


def bench_fleet(url: str, n: int) -> dict:
    post(url + "api/fleet", {**FLEET_START, "users": 399})  # the first search pays the imports
    one = [post(url + "api/fleet", {**FLEET_START, "users": 400 + 7 * i}) for i in range(n)]
    memo = [post(url + "api/fleet", {**FLEET_START, "users": 400}) for _ in range(min(n, 5))]
    five = [post(url + "api/fleet", {**FLEET_START, "users": 500 + 7 * i}) for i in range(n)]   # issue 19's 500 users
    teams = [post(url + "api/fleet", {**FLEET_TEAMS, "team": ["agents=120:coding-agent", "support=300:chat",
                                                             f"research={40 + i}:rag"]}) for i in range(n)]
    panel = [post(url + "api/teams", {**DEPLOYMENT, "team": ["agents=100:coding-agent", f"support={200 + i}:chat"]})
             for i in range(n)]
    return {"fleet_s": one, "memo_s": memo, "five_s": five, "teams_s": teams, "panel_s": panel}


def bench_slider(url: str, moves: int) -> dict:
    from playwright.sync_api import sync_playwright

    outside = []
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            tempfile.mkdtemp(), executable_path="/usr/bin/chromium", headless=True,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"],
            viewport={"width": 1400, "height": 1000})
        ctx.route("**/*", lambda r: r.continue_() if r.request.url.startswith(url) else r.abort())
        page = ctx.new_page()
        page.goto(url)
        page.wait_for_function(SETTLED, timeout=60_000)
        page.evaluate("() => { window.servesize.timings.length = 0; }")
        slider = page.locator("#r-median")
        slider.focus()
        for _ in range(moves):
            t0 = time.perf_counter()
            slider.press("ArrowRight")
            page.wait_for_function(SETTLED, timeout=60_000)
            outside.append(time.perf_counter() - t0)
            page.wait_for_timeout(250)  # a person lets go, looks, moves again (and the charts get their turn)
        inside = [t / 1000 for t in page.evaluate("() => window.servesize.timings")]
        ctx.close()
    return {"in_page_s": inside, "outside_s": outside}


def describe(name: str, xs: list[float]) -> str:
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))]
    return (f"{name:<42} n={len(xs):<3} median {1000 * statistics.median(xs):7.1f} ms   p95 {1000 * p95:7.1f} ms   "
            f"max {1000 * xs[-1]:7.1f} ms")


def print_fleet(f: dict) -> None:
    print(describe("POST /api/fleet, 400-ish users, priced GPUs", f["fleet_s"]))
    print(describe("POST /api/fleet, the same query (memo)", f["memo_s"]))
    print(describe("POST /api/fleet, 500-ish users, priced GPUs", f["five_s"]))
    print(describe("POST /api/fleet, three teams on H200/L40S", f["teams_s"]))
    print(describe("POST /api/teams, two teams on 2xH200", f["panel_s"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--starts", type=int, default=5)
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--moves", type=int, default=40)
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--fleet-requests", type=int, default=10)
    ap.add_argument("--fleet-only", action="store_true", help="only the fleet view's requests")
    args = ap.parse_args()
    if args.fleet_only:
        proc, url, _ = start()
        try:
            wait_ok(url)
            print_fleet(bench_fleet(url, args.fleet_requests))
        finally:
            stop(proc)
        return
    s = bench_start(args.starts)
    print(describe("serve start -> first page (GET /)", s["first_page_s"]))
    print(describe("serve start -> the form (GET /api/catalogue)", s["catalogue_s"]))
    proc, url, _ = start()
    try:
        wait_ok(url)
        r = bench_plan(url, args.requests)
        print(describe("POST /api/plan, a new scenario each time", r["fresh_s"]))
        print(describe("POST /api/plan, the same scenario (memo)", r["memoised_s"]))
        print(describe("POST /api/plan, a draft body (while dragging)", r["draft_s"]))
        if not args.no_browser:
            b = bench_slider(url, args.moves)
            print(describe("slider change -> verdict drawn (in page)", b["in_page_s"]))
            print(describe("key press -> page settled (outside)", b["outside_s"]))
        if args.fleet_requests > 0:  # 0: the plan view only
            print_fleet(bench_fleet(url, args.fleet_requests))
    finally:
        stop(proc)


if __name__ == "__main__":
    main()
