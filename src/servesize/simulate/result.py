"""One simulation end to end, and what it returns: ``servesize.api.simulate`` resolves the deployment
(the pool from ``memory``, service times and ``plan`` from the planner) and calls ``run_simulation``.

Stages, each optional past the first two: the replay (replay.py) and its one-pass LRU curve (curve.py);
the hit rate under each definition with an unbounded cache; the exact replay at the deployment's pool
(cache.py); FIFO and Belady at a few sizes beside LRU; users at the target hit rate (users.py), with an
exact replay of that many users; and ``plan``'s warm users for the Workload fitted from the same trace.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.jsonable import Record
from servesize.progress import Progress
from servesize.simulate.cache import CacheConfig, ExactResult, RecordedService, ServiceTimes, replay_exact
from servesize.simulate.curve import LruCurve, belady_hit_blocks, definitions, fifo_hit_blocks, lru_curve
from servesize.simulate.replay import Replay, ReplayOptions, build_replay, describe_choices
from servesize.simulate.traces import Trace
from servesize.simulate.users import TraceWorkload, UsersAtTarget, fit_trace_workload, users_at_target
from servesize.workload.model import Workload

SERVICES = ("trace", "model", "none")
DEFAULT_TARGET = 0.9
BOUND_SIZES = 4  # pool sizes at which FIFO and Belady are replayed beside LRU (each is a full replay)



@frozen
class PoolSpec(Record):
    """The engine's KV pool: ``num_blocks`` as vLLM counts them (its num_gpu_blocks, the null block included)."""

    num_blocks: int
    block_size: int
    source: str
    max_model_len: int | None = None
    max_num_seqs: int | None = None

    @property
    def tokens(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def usable_tokens(self) -> int:
        """The blocks a request may hold: vLLM's null block is never handed out."""
        return (self.num_blocks - 1) * self.block_size

    JSON_EXTRA = ("tokens", "usable_tokens")


@frozen
class SimulateOptions:
    replay: ReplayOptions = field(default_factory=ReplayOptions)
    target: float = DEFAULT_TARGET
    service: str | None = None      # None: 'model' with a deployment, else 'trace' when the trace has times, else 'none'
    output_blocks: bool = True
    exact: bool = True
    bounds: bool = True
    users_search: bool = True
    curves_for_users: tuple[int, ...] = ()  # further one-pass curves, one per user count (plotted together)

    def __post_init__(self):
        if self.service is not None and self.service not in SERVICES:
            raise BadInput(f"--service must be one of {', '.join(SERVICES)}, got {self.service!r}")
        if not 0 < self.target <= 1:
            raise BadInput(f"--target-hit-rate must be in (0, 1], got {self.target!r}")


@dataclass
class SimulationResult:
    trace: dict
    choices: dict
    pool: PoolSpec | None
    curve: LruCurve
    definitions: list[dict] = field(default_factory=list)
    exact: ExactResult | None = None
    bounds: list[dict] = field(default_factory=list)
    users: UsersAtTarget | None = None
    users_exact: dict | None = None
    fitted: TraceWorkload | None = None
    plan: dict | None = None
    notes: list[str] = field(default_factory=list)
    seconds: dict = field(default_factory=dict)
    plot: str | None = None
    extra_curves: list = field(default_factory=list)  # (label, LruCurve)
    exit_code: int = 0

    @property
    def choices_line(self) -> str:
        return describe_choices(self.choices)

    def curve_points(self, points: int = 60) -> list[dict]:
        blocks = self.curve.grid(points)
        rates = self.curve.at_pool(blocks)
        return [{"num_blocks": int(b), "tokens": int(b) * self.curve.block_size, "token_hit_rate": float(h)}
                for b, h in zip(blocks, rates)]

    def render(self, explain: bool = False) -> str:
        from servesize.simulate.report import render

        return render(self, explain)

    def to_dict(self) -> dict:
        c = self.curve
        pool_rate = float(c.at_pool(self.pool.num_blocks)) if self.pool else None
        return {
            "trace": self.trace, "choices": self.choices, "choices_line": self.choices_line,
            "pool": self.pool.to_dict() if self.pool else None,
            "curve": {"unbounded_token_hit_rate": c.ideal_token_hit_rate, "at_pool_token_hit_rate": pool_rate,
                      "pool_for_target": c.pool_for(self.choices.get("target", DEFAULT_TARGET)),
                      "pinning": "ignored (every request served in no time)", "output_blocks": c.output_blocks,
                      "measured_requests": c.measured_requests, "measured_tokens": c.measured_tokens,
                      "points": self.curve_points()},
            "definitions": self.definitions,
            "exact": None if self.exact is None else self.exact.summary(),
            "session_warmth": None if self.exact is None else self.exact.session_warmth(),
            "bounds": self.bounds, "users": None if self.users is None else self.users.to_dict(),
            "users_exact": self.users_exact, "fitted_workload": None if self.fitted is None else self.fitted.to_dict(),
            "plan": self.plan, "notes": self.notes, "seconds": self.seconds, "plot": self.plot,
            "curves_for_users": [{"label": label, "unbounded_token_hit_rate": cv.ideal_token_hit_rate,
                                  "at_pool_token_hit_rate": float(cv.at_pool(self.pool.num_blocks)) if self.pool else None,
                                  "points": [{"num_blocks": int(b), "token_hit_rate": float(h)}
                                             for b, h in zip(cv.grid(60), cv.at_pool(cv.grid(60)))]}
                                 for label, cv in self.extra_curves],
        }


def _service(name: str | None, replay: Replay, pool: PoolSpec | None,
             model_service: Callable[[Replay], ServiceTimes] | None, notes: list[str]) -> ServiceTimes:
    has_times = bool(np.isfinite(replay.service_s).any())
    chosen = name or ("model" if model_service is not None else "trace" if has_times else "none")
    if chosen == "model":
        if model_service is None:
            raise BadInput("--service model prices requests on a deployment: give MODEL and --gpus")
        return model_service(replay)
    if chosen == "trace":
        if not has_times:
            raise BadInput("the trace has no service times (api_time / end_s): use --service model or --service none")
        return RecordedService(replay.service_s)
    return ServiceTimes()


def _bound_sizes(curve: LruCurve, pool: PoolSpec | None) -> list[int]:
    grid = curve.grid(BOUND_SIZES + 2)[1:-1]
    picks = np.unique(np.geomspace(max(int(grid[0]), 4), max(int(grid[-1]), 8), BOUND_SIZES).astype(np.int64)).tolist()
    if pool is not None and pool.num_blocks not in picks:
        picks.append(pool.num_blocks)
    return sorted(picks)


def _bounds(replay: Replay, curve: LruCurve, pool: PoolSpec | None, output_blocks: bool, progress: Progress) -> list[dict]:
    rows = []
    for nb in _bound_sizes(curve, pool):
        cap = int(LruCurve.capacity_of_pool(nb))
        if cap < 1:
            continue
        progress(f"bounds: FIFO and Belady at {nb:,} blocks")
        scale = replay.block_size / replay.measured_tokens() if replay.measured_tokens() else 0.0
        rows.append({"num_blocks": nb, "tokens": nb * replay.block_size, "lru": float(curve.at_pool(nb)),
                     "fifo": fifo_hit_blocks(replay, cap, output_blocks=output_blocks) * scale,
                     "belady": belady_hit_blocks(replay, cap, output_blocks=output_blocks) * scale,
                     "deployment": pool is not None and nb == pool.num_blocks})
    return rows


def _users_stage(trace: Trace, opts: SimulateOptions, pool: PoolSpec, res: SimulationResult,
                 model_service: Callable[[Replay], ServiceTimes] | None, progress: Progress) -> None:
    base = replace(opts.replay, users=None, block_size=pool.block_size, max_model_len=pool.max_model_len,
                   align=opts.replay.align if opts.replay.align in ("t0", "stagger") else "t0")
    res.users = users_at_target(trace, base, pool.num_blocks, opts.target, output_blocks=opts.output_blocks,
                                progress=progress)
    if res.users.users and opts.exact:
        n = res.users.users
        progress(f"exact replay of {n:,} users (pinning and service times)")
        rp = build_replay(trace, replace(base, users=n))
        service = _service(opts.service, rp, pool, model_service, res.notes)
        ex = replay_exact(rp, CacheConfig(pool.num_blocks, pool.block_size, opts.output_blocks, pool.max_num_seqs), service)
        res.users_exact = {"users": n, **ex.summary(), "choices_line": describe_choices(rp.choices)}


def run_simulation(trace: Trace, pool: PoolSpec | None, opts: SimulateOptions, *,
                   model_service: Callable[[Replay], ServiceTimes] | None = None,
                   plan_fn: Callable[[Workload], dict] | None = None, progress: Progress | None = None,
                   fitted: TraceWorkload | None = None) -> SimulationResult:
    say = progress or (lambda msg: None)
    clock: dict[str, float] = {}
    t = time.perf_counter()
    ropts = opts.replay
    if pool is not None:
        ropts = replace(ropts, block_size=pool.block_size, max_model_len=ropts.max_model_len or pool.max_model_len)
    say("building the replay")
    replay = build_replay(trace, ropts)
    clock["replay_s"] = time.perf_counter() - t
    say(f"one-pass LRU curve over {replay.requests:,} requests")
    t = time.perf_counter()
    curve = lru_curve(replay, output_blocks=opts.output_blocks)
    clock["curve_s"] = time.perf_counter() - t
    res = SimulationResult(trace=trace.to_dict(), choices={**replay.choices, "target": opts.target}, pool=pool, curve=curve,
                           notes=list(trace.report.notes))
    if ropts.users is None:
        res.definitions = definitions(trace, replay, curve)
    if pool is not None and opts.exact:
        service = _service(opts.service, replay, pool, model_service, res.notes)
        say(f"exact replay through {pool.num_blocks:,} blocks (service: {service.name})")
        t = time.perf_counter()
        res.exact = replay_exact(replay, CacheConfig(pool.num_blocks, pool.block_size, opts.output_blocks, pool.max_num_seqs),
                                 service, progress=lambda i, n: say(f"exact replay {i:,}/{n:,} requests"))
        clock["exact_s"] = time.perf_counter() - t
    if opts.bounds:
        t = time.perf_counter()
        res.bounds = _bounds(replay, curve, pool, opts.output_blocks, say)
        clock["bounds_s"] = time.perf_counter() - t
    for n in opts.curves_for_users:
        say(f"one-pass LRU curve for {n:,} users")
        rp = build_replay(trace, replace(ropts, users=n, align=ropts.align if ropts.align in ("t0", "stagger") else None))
        res.extra_curves.append((f"{n:,} users", lru_curve(rp, output_blocks=opts.output_blocks)))
    if pool is not None and opts.users_search and trace.has_sessions:
        t = time.perf_counter()
        _users_stage(trace, opts, pool, res, model_service, say)
        clock["users_s"] = time.perf_counter() - t
    if plan_fn is not None:
        say("fitting a workload from the trace for plan")
        res.fitted = fitted or fit_trace_workload(trace, replace(ropts, users=None))
        try:
            res.plan = plan_fn(res.fitted.workload)
        except BadInput as exc:
            res.notes.append(f"plan for the fitted workload: {exc}")
    res.seconds = clock
    return res


def plan_summary(plan: Any) -> dict:
    """The figures of a Plan that sit beside the replay: warm users per replica and what binds."""
    warm = plan.result.warm
    users = warm.per_replica.get("users", warm.users)
    return {"warm_users": users.to_dict(), "binding": plan.result.binding,
            "ceilings": {k: float(v) for k, v in plan.result.values.items()},
            "pool_tokens": float(plan.fixed.pool_tokens), "workload": plan.workload.describe()}
