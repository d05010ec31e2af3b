"""How many sessions stay warm: a Monte-Carlo fill of the KV pool (working-set-model.md 2.6).

One *fill* is an LRU snapshot of whole sessions: requests arrive in order, each becomes a
resident session, and the pool holds the most recent ones whose cost fits. Repeating the fill
over many independent draws gives a spread (p5 / p50 / p95) rather than a single estimate.

Per fill (steps as in 2.6):

- each session costs its unique tokens (full - prefix; full when cold) plus its constant
  recurrent state as token-equivalents, state_bytes / kv_bytes_per_token;
- the shared prefixes are reserved once per class present;
- GPU: the largest k whose cumulative cost fits the budget (ties fit);
- CPU offload (storage view): the sessions after those, at unique x b + s bytes each, fill the
  RAM budget (offload bytes - reserved prefix bytes);
- cold sessions occupy their full length and never count as warm.

Fills are rows and sessions columns of one matrix of random numbers (workload.draws.RandomBank),
drawn in column blocks: fill k's i-th session is the same however many sessions are drawn. All
fills take their next block of sessions at once; the cumulative cost runs along each row, each
row's count is a comparison summed along it (searchsorted per row), and a fill drops out once a
session no longer fits: no Python loop runs over fills, and no fill is costed much past its
budget. A fill never runs short of sessions (the seed raised when its fixed draw was exhausted,
5a); ``draws_used`` reports the draw length, doubled from ``draws``, that would have held every fill.

Topology: tensor parallel is one engine and one pool (the caller passes that pool). Data
parallel is ``replicas`` independent engines, ``pool_tokens`` being one replica's pool:

- sticky routing (every session pinned to a home replica): total = replicas x the one-replica
  figure (the seed's rule; for p5 it is conservative, as the sum of independent replicas
  spreads less than replicas x one);
- random routing (a balancer that ignores where the cache lives, as vLLM's internal DP
  balancer does: queue depth only): a returning request lands on its previous replica with
  probability 1/replicas and is warm only if its prefix is resident on the replica it lands
  on. Each replica's request stream is a random thinning of the whole stream, so it sees the
  same mix of sessions and its LRU keeps the same most-recent set: in steady state every
  session that stays warm is resident on every replica (multiple residency), and the system
  keeps the one-replica count warm, not replicas x it. Seen the other way: the sticky-sized
  population (replicas x K sessions, each resident once) would hit its home replica with
  probability 1/replicas, i.e. replicas x K x 1/replicas = K warm. Both views give
  total = the one-replica figure. ``sticky_population_hit_rate_bound`` = 1/replicas is reported
  beside it as an upper bound: LRU under a cyclic load does worse (an equal-session LRU
  simulation, tests/test_warm_capacity.py, gives about 0.31 at 2 replicas and 0.14 at 4).
  Each session also pays up to replicas - 1 cold first visits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import field
from typing import Any

import numpy as np

from servesize.derivation import Derivation
from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.jsonable import Record
from servesize.limits import DEFAULT_DRAWS, DEFAULT_FILLS, DEFAULT_SEED, MAX_DRAWS
from servesize.percentile import percentile50, percentile_position, percentiles
from servesize.units import GB, fmt_bytes
from servesize.workload.draws import RandomBank
from servesize.workload.model import Workload

# Host-to-device restore bandwidth when the caller does not give one. PCIe Gen5 x16 signals
# 64 GB/s per direction (PCI-SIG, PCIe 5.0 base spec: 32 GT/s x 16 lanes, 128b/130b); pinned
# host-to-device copies reach roughly 50 GB/s of it. A modelled assumption: pass the GPU's own
# figure (or a measured one) as pcie_bytes_per_s.
DEFAULT_PCIE_BYTES_PER_S = 50 * GB
_MAX_DRAWS = MAX_DRAWS  # the most a fill grows its draws to (servesize.limits)
_MAX_ELEMENTS_PER_CHUNK = 4_000_000  # rows are processed in chunks of at most this many cells
_PROBE = 32  # the first sessions of every fill: the median warm session's restore size
PERCENTILES = (5, 50, 95)
# what one fill counts (warm ones only): every class, the users, in HBM, in host RAM only
_COUNTS = ("sessions", "users", "gpu_resident", "cpu_offloaded")


@frozen
class HostLink:
    """What an offloaded session is restored over: the link's name, its one-way signalling rate per GPU
    (B/s), the fraction of it a pinned copy reaches, how many GPUs restore their share at once (the TP
    ranks), and where the link was read."""

    name: str
    signal_bytes_per_s: float
    efficiency: float
    links: int
    source: str

    @property
    def bytes_per_s(self) -> float:
        return self.signal_bytes_per_s * self.efficiency * self.links


@frozen
class Percentiles(Record):
    p5: float
    p50: float
    p95: float

    @classmethod
    def of(cls, counts: np.ndarray) -> Percentiles:
        """numpy linear-interpolated percentiles 5/50/95 (the seed's statistic)."""
        a, b, c = percentiles(counts, PERCENTILES)
        return cls(a, b, c)

    def scaled(self, k: float) -> Percentiles:
        return Percentiles(self.p5 * k, self.p50 * k, self.p95 * k)

    def __str__(self) -> str:
        return f"{self.p5:,.0f} / {self.p50:,.0f} / {self.p95:,.0f}"


@frozen
class WarmCapacity(Record):
    """Warm sessions p5/p50/p95, for the whole deployment and for one replica."""

    sessions: Percentiles        # warm sessions of every class (GPU + CPU), system total
    users: Percentiles           # warm user-class sessions only: the 'users kept warm' figure
    gpu_resident: Percentiles    # warm sessions in HBM: the decode view
    cpu_offloaded: Percentiles   # warm sessions in host RAM, taken per fill (all - gpu)
    users_gpu_resident: Percentiles   # warm users in HBM, in the fill at each percentile of warm users
    users_cpu_offloaded: Percentiles  # warm users in host RAM only, in that same fill (the two add up to its users)
    per_replica: dict[str, Percentiles]  # the same four for one replica's pool
    replicas: int
    routing: str                 # 'single' | 'sticky' | 'random'
    sticky_population_hit_rate_bound: float  # random routing: upper bound on a sticky-sized population's hit rate
    pool_tokens: float
    kv_bytes_per_token: float
    state_bytes_per_session: float
    cpu_offload_bytes: float
    restore: dict[str, Any] | None  # PCIe restore cost of an offloaded session
    fills: int
    draws_requested: int
    draws_used: int
    seed: int
    derivation: Derivation = field(repr=False)
    assumptions: tuple[str, ...] = ()

    def explain(self) -> str:
        lines = [self.derivation.render(), "", "assumptions:"]
        lines += [f"  - {a}" for a in self.assumptions]
        return "\n".join(lines)



def _ranges(starts: np.ndarray, stops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(owner, value) of every integer in [starts[i], stops[i]) for each i, in order."""
    n = stops - starts
    owner = np.repeat(np.arange(n.size), n)
    offset = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
    return owner, np.repeat(starts, n) + offset


def _count_at_most(cum: np.ndarray, budgets: np.ndarray, rows: np.ndarray, q: np.ndarray) -> np.ndarray:
    """For each pair (rows[i], q[i]): how many entries of the non-decreasing row ``cum[rows[i]]`` are <= budgets[q[i]].

    Entry j is <= budget q exactly when q >= s_j = the number of budgets below it (the budgets are sorted), so
    the count is the number of j with s_j <= q: one searchsorted of the block into the budgets, then a running
    histogram per row. A budget below every entry of the block (q < first: the block's first session alone passes
    it, as a cold session of a long context can) counts none; one above every entry counts them all. With no more
    pairs than rows (a pool or two: the plan's fill) the pairs' entries are compared directly, the same count for
    less work."""
    if q.size <= cum.shape[0]:  # as few pairs as rows (one pool, or two tiers): each pair's entries compared
        direct: np.ndarray = np.count_nonzero(cum[rows] <= budgets[q][:, None], axis=1)
        return direct
    first = int(np.searchsorted(budgets, cum[:, 0].min(), side="left"))  # no entry has fewer budgets below it
    window = budgets[first:int(np.searchsorted(budgets, cum[:, -1].max(), side="left"))]
    width = window.size + 1
    s = np.searchsorted(window, cum, side="left")  # (A, 64), each row non-decreasing
    hist = np.bincount((np.arange(cum.shape[0])[:, None] * width + s).ravel(), minlength=cum.shape[0] * width)
    at_most = np.cumsum(hist.reshape(cum.shape[0], width), axis=1)
    # a budget at or above a block's last entry counts them all (the last column); one below its first, none
    counts: np.ndarray = np.where(q >= first, at_most[rows, np.clip(q - first, 0, width - 1)], 0)
    return counts


class FillPass:
    """The warm fill's counting, the one there is: ``warm_capacity``'s pool and the fleet's hundreds of pools
    (sizing/fill_pass.py) both count with it.

    Per fill, sessions join in recency order, each with its cost; a pool of budget B holds those whose running
    cost is at most B (ties fit). For each of ``budgets`` (sorted), ``held[fill, q]`` is how many sessions it holds
    and ``counts[fill, q, c]`` how many of them are of class c (``members[c]``; the classes need not be disjoint,
    nor cover every session). A block of sessions resolves every budget its running cost passes, so a fill's work
    follows its sessions, never the number of budgets. ``relative``: one budget more per fill (``rel_held``,
    ``rel_counts``): the running cost of the sessions the first budget holds plus ``relative`` (at least the first
    budget): the seed's additive host-RAM tier, which holds what the GPU evicted after it."""

    def __init__(self, fills: int, budgets: np.ndarray, classes: int, relative: float | None = None):
        self.budgets = budgets
        self.total = np.zeros(fills)
        self.running = np.zeros((fills, classes), dtype=np.int64)
        self.resolved = np.zeros(fills, dtype=np.int64)
        self.counts = np.zeros((fills, budgets.size, classes), dtype=np.int32)
        self.seen = np.zeros(fills, dtype=np.int64)  # sessions added before the block being added
        self.held = np.zeros((fills, budgets.size), dtype=np.int64)
        self.relative = relative
        self.taken = np.zeros(fills)  # relative: the running cost of the sessions the first budget holds, so far
        self.rel_counts = np.zeros((fills, classes), dtype=np.int64)
        self.rel_held = np.zeros(fills, dtype=np.int64)
        self.rel_open = np.full(fills, relative is not None)

    def add(self, rows: np.ndarray, cost: np.ndarray, members: Sequence[np.ndarray]) -> None:
        """The next block of sessions (columns of ``cost``) of fills ``rows``, ``members[c]`` (bool, the block's
        shape) the sessions of class c: resolve every budget their running cost passes."""
        cum = np.cumsum(cost, axis=1)
        cum += self.total[rows, None]
        end = cum[:, -1]
        # a budget below the block's end is passed inside this block (or at its start): every earlier session
        # fits it (their cost is at most the carried total <= the budget) and no later one does
        upto = np.searchsorted(self.budgets, end, side="left")
        passed = upto > self.resolved[rows]
        owner, q = _ranges(self.resolved[rows], upto) if passed.any() else (passed, passed[:0])
        if q.size:
            inside = _count_at_most(cum, self.budgets, owner, q)  # the block's first `inside` sessions fit
            self.held[rows[owner], q] = self.seen[rows[owner]] + inside
            held = np.arange(cum.shape[1]) < inside[:, None]
            here = self.running[rows[owner]]
            for c, m in enumerate(members):
                here[:, c] += np.count_nonzero(held & m[owner], axis=1)
            self.counts[rows[owner], q] = here
        if self.relative is not None:
            self._add_relative(rows, cum, members)
        for c, m in enumerate(members):
            self.running[rows, c] += np.count_nonzero(m, axis=1)
        self.seen[rows] += cum.shape[1]
        self.total[rows] = end
        self.resolved[rows] = upto

    def _add_relative(self, rows: np.ndarray, cum: np.ndarray, members: Sequence[np.ndarray]) -> None:
        first, relative = self.budgets[0], float(self.relative or 0.0)
        self.taken[rows] = np.maximum(self.taken[rows], np.max(np.where(cum <= first, cum, 0.0), axis=1))
        fits = cum <= np.maximum(first, self.taken[rows] + relative)[:, None]
        for c, m in enumerate(members):
            self.rel_counts[rows, c] += np.count_nonzero(fits & m, axis=1)
        self.rel_held[rows] += np.count_nonzero(fits, axis=1)
        self.rel_open[rows] &= fits[:, -1]

    def open(self, rows: np.ndarray) -> np.ndarray:
        """Which of ``rows`` some budget still holds more of (their next sessions may count)."""
        still: np.ndarray = (self.resolved[rows] < self.budgets.size) | self.rel_open[rows]
        return still

    def close(self, rows: np.ndarray) -> None:
        """Fills stopped before their budgets (at a cap): the budgets not reached get the counts so far (lower
        bounds)."""
        owner, q = _ranges(self.resolved[rows], np.full(rows.size, self.budgets.size))
        if q.size:
            self.counts[rows[owner], q] = self.running[rows[owner]]
            self.held[rows[owner], q] = self.seen[rows[owner]]


# what warm_capacity's fill counts of the sessions a pool holds: the warm ones, and the warm users' (a cold session
# is held, never warm; a warm subagent's is warm, not a user's)
_WARM, _WARM_USER = 0, 1


def _fill_counts(workload: Workload, bank: RandomBank, r0: int, r1: int, max_draws: int, budgets: np.ndarray,
                 state_tokens: float, relative: float | None) -> FillPass:
    """The fill's counts for fills [r0, r1), adding sessions one column block of the bank at a time.

    After each block the fills that are full drop out; the rest get the next block. A fill's
    sessions are the same however many are drawn (RandomBank), so its counts equal those of an
    unbounded draw. Costs are in token-equivalents on both tiers: a CPU-offloaded session's
    unique x b + s bytes is b x (unique + s / b), the same cost as on the GPU. Raises when a
    fill holds ``max_draws`` sessions without filling.
    """
    fill = FillPass(r1 - r0, budgets, 2, relative)
    active = np.arange(r1 - r0)
    c0 = 0
    while active.size:
        if c0 >= max_draws:
            raise BadInput(f"warm capacity: a fill holds more than {max_draws:,} sessions; "
                           "the pool is too large for this workload's session sizes to simulate")
        raw = bank.take(r0, r1, c0, c0 + bank.COLS)
        if active.size < r1 - r0:
            raw = raw[active]
        cost, is_cold, is_sub = workload.realise_costs(raw, state_tokens)
        warm = ~is_cold
        fill.add(active, cost, (warm, warm & ~is_sub))  # _WARM, _WARM_USER
        active = active[fill.open(active)]
        c0 += bank.COLS
    return fill


def _simulate(workload: Workload, bank: RandomBank, fills: int, draws: int, gpu_budget: float, state_tokens: float,
              ram_budget_tokens: float, inclusive: bool) -> tuple[tuple[np.ndarray, ...], int]:
    """(warm sessions, warm users, GPU-resident, offloaded, warm users GPU-resident) per fill, and the draw length
    that holds every fill. The GPU holds the most recent sessions that fit its budget; host RAM (``inclusive``:
    vLLM's offloading connector keeps a copy of every computed block, the most recent up to its size) those that
    fit its own, or (additive, the seed's) what the GPU evicted, after the GPU's sessions."""
    budgets = [gpu_budget]
    if ram_budget_tokens > 0 and inclusive:
        budgets.append(max(gpu_budget, ram_budget_tokens))
    relative = ram_budget_tokens if ram_budget_tokens > 0 and not inclusive else None
    rows_per_chunk = max(bank.ROWS, _MAX_ELEMENTS_PER_CHUNK // bank.COLS // bank.ROWS * bank.ROWS)
    parts = [_fill_counts(workload, bank, start, min(fills, start + rows_per_chunk), max(draws, _MAX_DRAWS),
                          np.asarray(budgets, dtype=float), state_tokens, relative)
             for start in range(0, fills, rows_per_chunk)]  # chunks bound memory; one chunk in the usual case
    gpu = np.concatenate([p.counts[:, 0, :] for p in parts])
    resident = np.concatenate([p.rel_counts if relative is not None else p.counts[:, -1, :] for p in parts])
    held = np.concatenate([p.rel_held if relative is not None else p.held[:, -1] for p in parts])
    counts = tuple(c.astype(np.int64) for c in (resident[:, _WARM], resident[:, _WARM_USER], gpu[:, _WARM],
                                                   resident[:, _WARM] - gpu[:, _WARM],  # offloaded per fill
                                                   gpu[:, _WARM_USER]))
    # the draw length the seed's doubling rule would have reached: every fill exhausts its budget inside it
    most = int(held.max())
    draws_used = draws
    while draws_used <= most:
        draws_used = min(max(draws, _MAX_DRAWS), 2 * draws_used)
    return counts, draws_used


def _users_split(users: np.ndarray, users_gpu: np.ndarray) -> tuple[Percentiles, Percentiles]:
    """Where the warm users of the fill at each percentile live: (in HBM, in host RAM only), from one fill each,
    the fill whose user count has the percentile's rank (nearest rank, ties in fill order), so the two add up to
    that fill's warm users. A percentile of each count on its own would not add up."""
    order = np.argsort(users, kind="stable")
    picks = [order[int(round(percentile_position(len(users), q)))] for q in PERCENTILES]
    gpu = [float(users_gpu[i]) for i in picks]
    ram = [float(users[i] - users_gpu[i]) for i in picks]
    return Percentiles(*gpu), Percentiles(*ram)


def _median_warm_unique(workload: Workload, bank: RandomBank, fills: int, head: int) -> float:
    """The median warm session's unique tokens over the first ``head`` sessions of every fill (a fixed, seeded subset)."""
    unique, is_cold, _ = workload.realise_costs(bank.take(0, fills, 0, head))
    warm = unique[~is_cold]
    return percentile50(warm) if warm.size else 0.0


def _check(pool_tokens: float, kv_bytes_per_token: float, state_bytes_per_session: float, cpu_offload_bytes: float,
           replicas: int, fills: int, draws: int, pcie_bytes_per_s: float | None, offload_tier: str) -> None:
    if offload_tier not in ("inclusive", "additive"):
        raise BadInput(f"warm capacity: offload_tier must be inclusive or additive, got {offload_tier!r}")
    for name, value in (("pool_tokens", pool_tokens), ("kv_bytes_per_token", kv_bytes_per_token),
                        ("state_bytes_per_session", state_bytes_per_session), ("cpu_offload_bytes", cpu_offload_bytes)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not math.isfinite(value):
            raise BadInput(f"warm capacity: {name} must be a finite number, got {value!r}")
    if kv_bytes_per_token <= 0:
        raise BadInput(f"warm capacity: kv_bytes_per_token must be > 0, got {kv_bytes_per_token!r}")
    if state_bytes_per_session < 0 or cpu_offload_bytes < 0:
        raise BadInput("warm capacity: state_bytes_per_session and cpu_offload_bytes must be >= 0")
    for name, value, lo in (("replicas", replicas, 1), ("fills", fills, 1), ("draws", draws, 1)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
            raise BadInput(f"warm capacity: {name} must be an integer >= {lo}, got {value!r}")
    if pcie_bytes_per_s is not None and not (pcie_bytes_per_s > 0 and math.isfinite(pcie_bytes_per_s)):
        raise BadInput(f"warm capacity: pcie_bytes_per_s must be > 0, got {pcie_bytes_per_s!r}")


def _system_scale(d: Derivation, routing: str, replicas: int) -> tuple[float, float]:
    """(system total / one replica, the sticky-population hit-rate bound) for the routing."""
    if routing == "sticky":
        return d.step("system_scale", "replicas", note="sticky routing: each replica keeps its own sessions warm",
                      replicas=replicas), 1.0
    if routing == "random":
        scale = d.step("system_scale", "1", note="random routing: every replica holds the same most-recent sessions (multiple residency)")
        return scale, d.step("sticky_population_hit_rate_bound", "1 / replicas",
                             note="upper bound on the hit rate of a population sized for sticky routing; LRU does worse",
                             replicas=replicas)
    return 1, 1.0


def _restore_rate(d: Derivation, pcie_bytes_per_s: float | None, link: HostLink | None) -> float:
    if link is not None:
        rate: float = d.step("pcie_bytes_per_s", "host_link_bytes_per_s * host_link_efficiency * tp_ranks", unit="B/s",
                      source=f"{link.name}: {link.source}; efficiency: offload.host_link_efficiency",
                      note="each TP rank restores its share of the KV over its own link, uncontended",
                      host_link_bytes_per_s=link.signal_bytes_per_s, host_link_efficiency=link.efficiency,
                      tp_ranks=link.links)
    elif pcie_bytes_per_s is not None:
        rate = d.given("pcie_bytes_per_s", float(pcie_bytes_per_s), unit="B/s", source="given")
    else:
        rate = d.given("pcie_bytes_per_s", float(DEFAULT_PCIE_BYTES_PER_S), unit="B/s",
                       source="assumed: PCIe Gen5 x16, ~50 GB/s effective host-to-device")
    return rate


def _restore(d: Derivation, median_unique: float, b: float, s_bytes: float, pcie_bytes_per_s: float | None,
             link: HostLink | None = None) -> dict[str, Any]:
    pcie = _restore_rate(d, pcie_bytes_per_s, link)
    per_100k = d.step("restore_s_per_100k_tokens", "100000 * kv_bytes_per_token / pcie_bytes_per_s", unit="s",
                      kv_bytes_per_token=b, pcie_bytes_per_s=pcie)
    median_s = d.step("restore_s_median_session",
                      "(median_unique_tokens * kv_bytes_per_token + state_bytes_per_session) / pcie_bytes_per_s",
                      unit="s", note="one offloaded session back to HBM before it can decode, uncontended",
                      median_unique_tokens=median_unique, kv_bytes_per_token=b, state_bytes_per_session=s_bytes,
                      pcie_bytes_per_s=pcie)
    assumed = link is None and pcie_bytes_per_s is None
    return {"pcie_bytes_per_s": pcie, "pcie_assumed": assumed or (link is not None and "(assumed)" in link.name),
            "link": link.name if link is not None else ("PCIe Gen5 x16 (assumed)" if assumed else "given"),
            "link_source": link.source if link is not None else "",
            "link_efficiency": link.efficiency if link is not None else None,
            "links": link.links if link is not None else 1,
            "seconds_per_100k_tokens": per_100k, "median_session_seconds": median_s,
            "median_session_unique_tokens": median_unique}


def _assumptions(workload: Workload, s_bytes: float, cpu_offload_bytes: float, offload_tier: str, routing: str,
                 replicas: int, draws: int, draws_used: int) -> tuple[str, ...]:
    out = [
        "a warm session is a whole-session LRU snapshot: the most recent sessions whose cost fits stay resident "
        "(vLLM evicts blocks, so partly evicted sessions would still get partial hits: not modelled)",
        f"session lengths: {workload.user.describe()}" + (f"; {workload.subagent.describe()}" if workload.subagent else ""),
        f"lengths above max_model_len ({workload.max_model_len:,}) pile up at it rather than being rejected or compacted",
        f"invalidation f = {workload.invalidation:g}: a cold request occupies its full length and never counts warm",
        "shared prefixes are byte-stable and stored once per class",
        f"state of {s_bytes:,.0f} B per session is charged in full for every resident session",
    ]
    if cpu_offload_bytes > 0:
        out.append("CPU offload tier: " + ("inclusive (vLLM's offloading connector stores every computed block "
                   "to host RAM, so RAM keeps the most recent sessions, GPU-resident or not)" if offload_tier == "inclusive"
                   else "additive (the seed's model: RAM holds what HBM evicted)"))
        out.append(f"CPU offload ({fmt_bytes(cpu_offload_bytes)} per engine) is priced as storage only: "
                   "an offloaded session comes back over the host link before it decodes (restore cost reported, contention not)")
    if routing == "sticky":
        out.append(f"data parallel, sticky routing: total = {replicas} x one replica (conservative at p5)")
    elif routing == "random":
        out.append(f"data parallel, random routing: total = one replica's figure (every replica holds the same "
                   f"most-recent sessions); a sticky-sized load would land on a replica holding its prefix "
                   f"at most 1/{replicas} of the time, and each session pays up to {replicas - 1} extra "
                   "cold first visit(s)")
    if draws_used != draws:
        out.append(f"draws grown from {draws:,} to {draws_used:,} so that every fill exhausts its budget")
    return tuple(out)


def warm_capacity(
    workload: Workload,
    pool_tokens: float,
    kv_bytes_per_token: float,
    state_bytes_per_session: float = 0,
    *,
    cpu_offload_bytes: float = 0,
    replicas: int = 1,
    sticky_routing: bool = True,
    fills: int = DEFAULT_FILLS,
    draws: int = DEFAULT_DRAWS,
    seed: int = DEFAULT_SEED,
    pcie_bytes_per_s: float | None = None,
    offload_tier: str = "inclusive",
    bank: RandomBank | None = None,
    host_link: HostLink | None = None,
) -> WarmCapacity:
    """Monte-Carlo warm capacity of one KV pool, and of ``replicas`` such pools.

    pool_tokens              one engine's KV pool in tokens (tensor parallel: the whole group's pool;
                             data parallel: one replica's).
    kv_bytes_per_token       b, KV bytes per token of the whole engine.
    state_bytes_per_session  s, constant per-session state (recurrent / Gated-DeltaNet), charged
                             s / b token-equivalents per resident session.
    cpu_offload_bytes        host RAM for KV offload per engine (vLLM's --kv-offloading-size is set
                             per engine); storage view.
    replicas, sticky_routing data-parallel copies and whether each session is pinned to one.
    fills, draws, seed       Monte-Carlo fills, sessions drawn per fill (grown when a fill does not
                             exhaust its budget), RNG seed (same inputs, same output).
    pcie_bytes_per_s         host-to-device bandwidth for the restore cost of offloaded sessions.
    offload_tier             'inclusive' (vLLM's CPU offloading stores every computed block to host RAM,
                             so RAM holds the most recent sessions whether or not they are also in HBM:
                             warm = max of the two tiers) or 'additive' (the seed's model: RAM holds
                             what HBM evicted, so the tiers add).
    host_link                the link the restore crosses (name, rate, efficiency, ranks, source); it sets
                             the restore rate, and pcie_bytes_per_s is then ignored.
    bank                     the random numbers (a workload.draws.RandomBank for ``seed``); pass one to
                             share it across calls: common random numbers, nothing drawn twice.
    """
    _check(pool_tokens, kv_bytes_per_token, state_bytes_per_session, cpu_offload_bytes, replicas, fills, draws,
           pcie_bytes_per_s, offload_tier)
    replicas, fills, draws = int(replicas), int(fills), int(draws)
    routing = "single" if replicas == 1 else ("sticky" if sticky_routing else "random")
    d = Derivation()
    d.given("pool_tokens", float(pool_tokens), unit="tokens", note="one engine's KV pool" + (" (one replica)" if replicas > 1 else ""))
    b = d.given("kv_bytes_per_token", kv_bytes_per_token, unit="B")
    s_bytes = d.given("state_bytes_per_session", state_bytes_per_session, unit="B")
    state_tokens = d.step("state_tokens_per_session", "state_bytes_per_session / kv_bytes_per_token", unit="tokens",
                          note="constant per-session state charged as KV token-equivalents",
                          state_bytes_per_session=s_bytes, kv_bytes_per_token=b)
    user_prefix = workload.user.prefix_tokens
    sub_prefix = workload.reserved_prefix_tokens() - user_prefix
    reserved = d.step("reserved_prefix_tokens", "user_prefix_tokens + subagent_prefix_tokens", unit="tokens",
                      note="shared prefixes held once per class present (the subagent's only when separate and r > 0)",
                      user_prefix_tokens=user_prefix, subagent_prefix_tokens=sub_prefix)
    gpu_budget = d.step("gpu_budget_tokens", "pool_tokens - reserved_prefix_tokens", unit="tokens",
                        pool_tokens=float(pool_tokens), reserved_prefix_tokens=reserved)
    ram_budget = 0.0
    if cpu_offload_bytes > 0:
        ram_budget = d.step("ram_budget_bytes", "cpu_offload_bytes - reserved_prefix_tokens * kv_bytes_per_token", unit="B",
                            note="sessions offloaded to host RAM cost unique tokens x b + s bytes each",
                            cpu_offload_bytes=float(cpu_offload_bytes), reserved_prefix_tokens=reserved, kv_bytes_per_token=b)

    bank = bank if bank is not None else RandomBank(seed, uniforms=workload.needs_uniforms)
    if bank.seed != int(seed) or (workload.needs_uniforms and not bank.uniforms):
        raise BadInput("warm capacity: the random bank was drawn for another seed, or without the bootstrap uniforms")
    if pool_tokens <= 0:
        counts, draws_used = (np.zeros(fills),) * (len(_COUNTS) + 1), draws
    else:
        counts, draws_used = _simulate(workload, bank, fills, draws, gpu_budget, state_tokens, ram_budget / float(b),
                                       offload_tier == "inclusive")

    one = dict(zip(_COUNTS, (Percentiles.of(c) for c in counts)))
    one["users_gpu_resident"], one["users_cpu_offloaded"] = _users_split(counts[1], counts[4])
    for key, p in one.items():
        d.given(f"warm_{key}_per_replica" if replicas > 1 else f"warm_{key}", str(p), note="p5 / p50 / p95 over fills")
    scale, hit = _system_scale(d, routing, replicas)
    total = {k: v.scaled(scale) for k, v in one.items()}

    restore = None
    if cpu_offload_bytes > 0 or pcie_bytes_per_s is not None:
        median_unique = _median_warm_unique(workload, bank, fills, min(draws, _PROBE)) if pool_tokens > 0 else 0.0
        restore = _restore(d, median_unique, b, s_bytes, pcie_bytes_per_s, host_link)

    return WarmCapacity(
        sessions=total["sessions"], users=total["users"], gpu_resident=total["gpu_resident"],
        cpu_offloaded=total["cpu_offloaded"], users_gpu_resident=total["users_gpu_resident"],
        users_cpu_offloaded=total["users_cpu_offloaded"], per_replica=one, replicas=replicas, routing=routing,
        sticky_population_hit_rate_bound=float(hit), pool_tokens=float(pool_tokens),
        kv_bytes_per_token=float(b), state_bytes_per_session=float(s_bytes),
        cpu_offload_bytes=float(cpu_offload_bytes), restore=restore, fills=fills,
        draws_requested=draws, draws_used=draws_used, seed=int(seed), derivation=d,
        assumptions=_assumptions(workload, s_bytes, cpu_offload_bytes, offload_tier, routing, replicas, draws, draws_used),
    )
