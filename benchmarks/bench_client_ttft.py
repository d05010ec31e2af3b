"""How precisely does the client time TTFT with 500, 1,000, 2,000 streams in flight, from one process or several?

The test server runs in a subprocess (its own interpreter, its own core where there is one, on uvloop
when installed and without garbage-collector pauses, so its own lateness stays small) with an
injected TTFT (default 200 ms) and stamps its own receive / first-send times (CLOCK_MONOTONIC, shared
by every process on Linux). The client opens N streams (default 500), their starts spread over a
ramp so all are in flight together, and reports measured-minus-injected TTFT error (p50/p99/max, ms),
decomposed into: request transit (client send -> server receive), server overshoot (server's own
first send - receive - injected), and delivery (server first send -> client timestamp).
``--processes P`` splits the N streams over P client processes (each its own StreamClient on
run_async, as each ``measure sessions --workers`` worker runs), all starting their ramps together.
Target: within 2 ms at p99. Figures are printed, not asserted.

    python benchmarks/bench_client_ttft.py [--streams 500[,1000,2000]] [--processes 1] [--ttft 0.2] [--tokens 50]
                                           [--itl 0.02] [--ramp 1.0] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

from servesize.measure.client import StreamClient, _quantile, run_async


def pct(values, q):
    return _quantile(sorted(values), q)


async def run(url: str, streams: int, tokens: int, ramp_s: float, first: int = 0, total: int | None = None) -> list:
    """Streams ``first`` .. ``first + streams - 1`` of ``total``, each started at its place on the ramp."""
    total = total or streams
    prompt = " ".join(f"w{i}" for i in range(64))
    async with StreamClient(url, timeout_s=60, stall_timeout_s=30) as client:
        await client.resolve_model()
        # warm the connection pool: N connections opened and kept alive, so TTFT below is not connect time
        await asyncio.gather(*(client.get("/health") for _ in range(streams)))

        async def one(i: int):
            await asyncio.sleep(ramp_s * i / total)
            return await client.complete(prompt, max_tokens=tokens, request_id=f"b{i}")

        return await asyncio.gather(*(one(i) for i in range(first, first + streams)))


def _share(job) -> list[dict]:
    """One client process's share (multiprocessing): its streams' results, as dicts. Every process waits for
    ``start`` on CLOCK_MONOTONIC (shared by all processes) so the ramps line up."""
    url, streams, tokens, ramp_s, first, total, start = job
    from servesize.measure.client import RequestResult

    async def go() -> list[RequestResult]:
        await asyncio.sleep(max(0.0, start - time.monotonic()))
        return await run(url, streams, tokens, ramp_s, first, total)
    return [r.to_dict() for r in run_async(go())]


def measure(url: str, a, streams: int) -> tuple[list, float]:
    t0 = time.perf_counter()
    if a.processes > 1:
        from servesize.measure.client import RequestResult

        per = [streams // a.processes + (k < streams % a.processes) for k in range(a.processes)]
        firsts = [sum(per[:k]) for k in range(a.processes)]
        start = time.monotonic() + 2.0 + 0.002 * streams  # each process opens its connections first
        jobs = [(url, per[k], a.tokens, a.ramp, firsts[k], streams, start) for k in range(a.processes)]
        with multiprocessing.get_context("fork").Pool(a.processes) as pool:
            results = [RequestResult.from_dict(d) for share in pool.map(_share, jobs) for d in share]
    elif a.plain:
        results = asyncio.run(run(url, streams, a.tokens, a.ramp))
    else:
        results = run_async(run(url, streams, a.tokens, a.ramp))
    return results, time.perf_counter() - t0


# the test server lives with the tests (it is not shipped in the wheel)
TESTSERVER = Path(__file__).resolve().parent.parent / "tests" / "measure" / "testserver.py"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", default="500", help="streams in flight, or a comma list of counts run one after another")
    p.add_argument("--processes", type=int, default=1, help="client processes the streams are split over")
    p.add_argument("--ttft", type=float, default=0.2)
    p.add_argument("--tokens", type=int, default=50)
    p.add_argument("--itl", type=float, default=0.02)
    p.add_argument("--ramp", type=float, default=1.0)
    p.add_argument("--json", action="store_true")
    p.add_argument("--plain", action="store_true",
                   help="the client on plain asyncio.run with the garbage collector on (for comparison; the harness "
                        "itself runs through servesize.measure.client.run_async)")
    a = p.parse_args(argv)
    counts = [int(x) for x in a.streams.split(",")]
    server = subprocess.Popen([sys.executable, str(TESTSERVER), "--ttft-base", str(a.ttft),
                               "--ttft-per-token", "0", "--itl", str(a.itl), "--timing", "--uvloop", "--no-gc"],
                              stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().strip()
        if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) > 1:
            cpus = sorted(os.sched_getaffinity(0))
            os.sched_setaffinity(server.pid, {cpus[0]})
            os.sched_setaffinity(0, set(cpus[1:]))
        runs = [(n, *measure(url, a, n)) for n in counts]
    finally:
        server.terminate()
        server.wait(10)
    outs = [report(a, n, results, wall) for n, results, wall in runs]
    if a.json:
        print(json.dumps(outs if len(outs) > 1 else outs[0], indent=2))


def report(a, streams: int, results: list, wall: float) -> dict:
    ok = [r for r in results if r.ok and r.server]
    bad = [r for r in results if not r.ok]
    err = [(r.ttft_s - a.ttft) * 1000 for r in ok]
    transit = [(r.server["t_received_ns"] - r.t_sent_ns) / 1e6 for r in ok]
    overshoot = [((r.server["t_first_sent_ns"] - r.server["t_received_ns"]) / 1e9 - a.ttft) * 1000 for r in ok]
    delivery = [((r.t_sent_ns + r.ttft_s * 1e9) - r.server["t_first_sent_ns"]) / 1e6 for r in ok]
    out = {"streams": streams, "processes": a.processes, "ok": len(ok), "errors": len(bad), "injected_ttft_ms": a.ttft * 1000,
           "tokens": a.tokens, "itl_ms": a.itl * 1000, "ramp_s": a.ramp, "wall_s": round(wall, 2), "cpus": os.cpu_count(),
           "load_average_1min": round(os.getloadavg()[0], 2)}
    if not ok:
        print(f"{streams} streams: no stream completed" + (f"; first error: {bad[0].error_line()}" if bad else ""))
        return out
    for name, values in (("ttft_error_ms", err), ("transit_ms", transit), ("server_overshoot_ms", overshoot),
                         ("delivery_ms", delivery)):
        out[name] = {"p50": round(pct(values, 0.5), 3), "p99": round(pct(values, 0.99), 3), "max": round(max(values), 3)}
    first = min(r.t_sent_ns for r in ok)
    worst = sorted(range(len(ok)), key=lambda i: -err[i])[:5]
    out["worst"] = [{"t_s": round((ok[i].t_sent_ns - first) / 1e9, 3), "error_ms": round(err[i], 2),
                     "transit_ms": round(transit[i], 2)} for i in worst]
    if a.json:
        return out
    print(f"{streams} streams over {a.processes} process(es), injected TTFT {a.ttft * 1000:.0f} ms, {a.tokens} tokens at "
          f"{a.itl * 1000:.0f} ms, ramp {a.ramp:g} s: {len(ok)} ok, {len(bad)} errors, {wall:.1f} s wall, "
          f"load average {out['load_average_1min']} on {out['cpus']} CPUs")
    for name in ("ttft_error_ms", "transit_ms", "server_overshoot_ms", "delivery_ms"):
        s = out[name]
        print(f"  {name:22s} p50 {s['p50']:8.3f}   p99 {s['p99']:8.3f}   max {s['max']:8.3f}")
    print("  worst: " + ", ".join(f"t={w['t_s']}s err {w['error_ms']} ms (transit {w['transit_ms']})" for w in out["worst"]))
    if bad:
        print(f"  first error: {bad[0].error_line()}")
    return out


if __name__ == "__main__":
    main()
