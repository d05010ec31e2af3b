"""How long the decode ceiling takes: bisection over one bank of common random numbers.

    python benchmarks/bench_decode.py [--repeats 21] [--fills 400]

Measured, not asserted: figures go in docs/benchmarks.md. The seed's own linear scan
(tables.py, max_mns_at_floor) took minutes for the same number; the seed's planner bisection
re-sampled every probe.
"""

from __future__ import annotations

import argparse
import statistics
import time

from servesize.planning.decode import DecodeSetup, ExpertRouting, contexts_from, decode_ceiling, decode_curve
from servesize.planning.prefill import PrefillSetup, prefill_costs
from servesize.workload.model import Workload

reference_contexts = contexts_from(Workload.seed_reference())  # the seed reference workload

GiB = 2**30




CASES = {
    "27B 1xH200 MTP 1.7 (seed)": DecodeSetup(
        bandwidth_bytes_per_s=4.8e12, weight_bytes_per_step=28.8 * GiB, kv_bytes_per_token_read=32_768,
        state_bytes_per_sequence=78_643_200, spec_speedup=1.7, bandwidth_efficiency=1.0),
    "27B TP2 MTP 1.7 (seed)": DecodeSetup(
        bandwidth_bytes_per_s=4.8e12, weight_bytes_per_step=28.8 * GiB, kv_bytes_per_token_read=32_768,
        state_bytes_per_sequence=78_643_200, spec_speedup=1.7, bandwidth_efficiency=1.0, tp=2),
    "35B-A3B 1xH200 MTP 1.7 (seed)": DecodeSetup(
        bandwidth_bytes_per_s=4.8e12, weight_bytes_per_step=1.94e9, kv_bytes_per_token_read=10_240,
        state_bytes_per_sequence=33_423_360, spec_speedup=1.7, bandwidth_efficiency=1.0,
        experts=ExpertRouting(256 * 3 * 2048 * 512 * 40, 256, 8)),
}


def timed(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=21)
    p.add_argument("--fills", type=int, default=400)
    args = p.parse_args(argv)
    print(f"decode ceiling at 40 tok/s, {args.fills} fills, median of {args.repeats} runs")
    for name, setup in CASES.items():
        t, result = timed(lambda s=setup: decode_ceiling(s, reference_contexts, floor_tok_s=40, fills=args.fills), args.repeats)
        print(f"  {name:32s} n = {result.n:4d}  ({result.evaluations} p50 evaluations)  {t * 1e3:7.1f} ms")
    setup = CASES["27B 1xH200 MTP 1.7 (seed)"]
    t, _ = timed(lambda: decode_curve(setup, reference_contexts, range(1, 257), fills=args.fills), max(3, args.repeats // 4))
    print(f"  full curve n = 1..256 (27B)         {t * 1e3:7.1f} ms")
    pre = PrefillSetup(gemm_params=24.5e9, attention_width=6144, full_attention_layers=16, peak_flops_per_gpu=1.979e15)
    t, _ = timed(lambda: prefill_costs(pre, sample_contexts=reference_contexts), max(3, args.repeats // 4))
    print(f"  prefill costs, 200,000 contexts     {t * 1e3:7.1f} ms")
    wl = Workload.seed_reference()
    t, _ = timed(lambda: prefill_costs(pre, length_moments=tuple(wl.length_moment(k) for k in (1, 2, 3, 4))),
                 max(3, args.repeats // 4))
    print(f"  prefill costs, exact moments        {t * 1e3:7.1f} ms   (what the plan uses)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
