"""How precisely does the client time TTFT with 500 streams in flight from one process?

The test server runs in a subprocess (its own interpreter, its own core where there is one, on uvloop
when installed and without garbage-collector pauses, so its own lateness stays small) with an
injected TTFT (default 200 ms) and stamps its own receive / first-send times (CLOCK_MONOTONIC, shared
by both processes on Linux). The client opens N streams (default 500), their starts spread over a
ramp so all are in flight together, and reports measured-minus-injected TTFT error (p50/p99/max, ms),
decomposed into: request transit (client send -> server receive), server overshoot (server's own
first send - receive - injected), and delivery (server first send -> client timestamp).
Target: within 2 ms at p99. Figures are printed, not asserted.

    python benchmarks/bench_client_ttft.py [--streams 500] [--ttft 0.2] [--tokens 50] [--itl 0.02] [--ramp 1.0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from servesize.measure.client import StreamClient, _quantile, run_async


def pct(values, q):
    return _quantile(sorted(values), q)


async def run(url: str, streams: int, tokens: int, ramp_s: float) -> list:
    prompt = " ".join(f"w{i}" for i in range(64))
    async with StreamClient(url, timeout_s=60, stall_timeout_s=30) as client:
        await client.resolve_model()
        # warm the connection pool: N connections opened and kept alive, so TTFT below is not connect time
        await asyncio.gather(*(client.get("/health") for _ in range(streams)))

        async def one(i: int):
            await asyncio.sleep(ramp_s * i / streams)
            return await client.complete(prompt, max_tokens=tokens, request_id=f"b{i}")

        return await asyncio.gather(*(one(i) for i in range(streams)))


# the test server lives with the tests (it is not shipped in the wheel)
TESTSERVER = Path(__file__).resolve().parent.parent / "tests" / "measure" / "testserver.py"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, default=500)
    p.add_argument("--ttft", type=float, default=0.2)
    p.add_argument("--tokens", type=int, default=50)
    p.add_argument("--itl", type=float, default=0.02)
    p.add_argument("--ramp", type=float, default=1.0)
    p.add_argument("--json", action="store_true")
    p.add_argument("--plain", action="store_true",
                   help="the client on plain asyncio.run with the garbage collector on (for comparison; the harness "
                        "itself runs through servesize.measure.client.run_async)")
    a = p.parse_args(argv)
    server = subprocess.Popen([sys.executable, str(TESTSERVER), "--ttft-base", str(a.ttft),
                               "--ttft-per-token", "0", "--itl", str(a.itl), "--timing", "--uvloop", "--no-gc"],
                              stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().strip()
        if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) > 1:
            cpus = sorted(os.sched_getaffinity(0))
            os.sched_setaffinity(server.pid, {cpus[0]})
            os.sched_setaffinity(0, set(cpus[1:]))
        t0 = time.perf_counter()
        if a.plain:
            results = asyncio.run(run(url, a.streams, a.tokens, a.ramp))
        else:
            results = run_async(run(url, a.streams, a.tokens, a.ramp))
        wall = time.perf_counter() - t0
    finally:
        server.terminate()
        server.wait(10)
    ok = [r for r in results if r.ok and r.server]
    bad = [r for r in results if not r.ok]
    err = [(r.ttft_s - a.ttft) * 1000 for r in ok]
    transit = [(r.server["t_received_ns"] - r.t_sent_ns) / 1e6 for r in ok]
    overshoot = [((r.server["t_first_sent_ns"] - r.server["t_received_ns"]) / 1e9 - a.ttft) * 1000 for r in ok]
    delivery = [((r.t_sent_ns + r.ttft_s * 1e9) - r.server["t_first_sent_ns"]) / 1e6 for r in ok]
    out = {"streams": a.streams, "ok": len(ok), "errors": len(bad), "injected_ttft_ms": a.ttft * 1000,
           "tokens": a.tokens, "itl_ms": a.itl * 1000, "ramp_s": a.ramp, "wall_s": round(wall, 2), "cpus": os.cpu_count()}
    for name, values in (("ttft_error_ms", err), ("transit_ms", transit), ("server_overshoot_ms", overshoot),
                         ("delivery_ms", delivery)):
        out[name] = {"p50": round(pct(values, 0.5), 3), "p99": round(pct(values, 0.99), 3), "max": round(max(values), 3)}
    worst = sorted(range(len(ok)), key=lambda i: -err[i])[:5]
    out["worst"] = [{"index": ok[i].tags.get("i") if ok[i].tags else None, "t_s": round((ok[i].t_sent_ns - ok[0].t_sent_ns) / 1e9, 3),
                     "error_ms": round(err[i], 2), "transit_ms": round(transit[i], 2)} for i in worst]
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{a.streams} streams, injected TTFT {a.ttft * 1000:.0f} ms, {a.tokens} tokens at {a.itl * 1000:.0f} ms, "
          f"ramp {a.ramp:g} s: {len(ok)} ok, {len(bad)} errors, {wall:.1f} s wall")
    for name in ("ttft_error_ms", "transit_ms", "server_overshoot_ms", "delivery_ms"):
        s = out[name]
        print(f"  {name:22s} p50 {s['p50']:8.3f}   p99 {s['p99']:8.3f}   max {s['max']:8.3f}")
    print("  worst: " + ", ".join(f"t={w['t_s']}s err {w['error_ms']} ms (transit {w['transit_ms']})" for w in out["worst"]))
    if bad:
        print(f"  first error: {bad[0].error_line()}")


if __name__ == "__main__":
    main()
