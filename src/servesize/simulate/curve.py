"""The hit rate at every pool size in one pass (LRU stack distances), and FIFO and Belady bounds.

**LRU, all sizes at once** (Mattson, Gecsei, Slutz and Traiger, "Evaluation techniques for storage
hierarchies", IBM Systems Journal 9(2), 1970): under LRU a cache of C blocks holds exactly the C most
recently used ones, so a block is a hit at every C larger than its *stack distance* (the number of
distinct blocks used since it was last used). One pass that records every access's distance gives the
hit rate at every C. Here the order of use is vLLM's: a request's blocks are released tail first, so its
first block is the most recently used and its last the least (cache.py), and with chained ids a block's
parent is always nearer the top than the block itself, so the longest cached prefix is exactly the
blocks whose distance is below C.

The pass is over runs, not blocks: the blocks one request used and nobody has used since lie together on
the stack (a *segment*), a later request takes a prefix of a segment's remaining blocks, and a Fenwick tree
over segments gives how many blocks lie above any segment. A request costs a few tree operations per
segment it touches, plus numpy work over its blocks.

Pinning is ignored (every request is served in no time, one after another), so the curve is the exact
simulator's answer with ``service='none'`` (tests/simulate/test_curve.py) for every pool that admits the
largest request (``smallest_pool``; below it vLLM refuses that request, and the curve does not); the pool of
vLLM with ``num_blocks`` blocks holds an LRU stack of ``num_blocks - 2``: the null block, and the block the
next request's partial tail takes first.

**Bounds at chosen sizes**, over the same requests, the same cap and the same window: FIFO (blocks leave in
the order they came, a hit changes nothing; a request's missing blocks enter in prompt order), and Belady's
optimum (evict the block used again farthest in the future; a new block that would be the farthest is not
kept; ties: the deepest first), as the reference tools (kvcache-simulator) report them.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field, replace

import numpy as np

from servesize.errors import BadInput
from servesize.progress import Counted as Progress
from servesize.simulate.replay import Replay, warm_depth
from servesize.simulate.traces import Trace

POOL_OVERHEAD_BLOCKS = 2  # vLLM's null block + the partial block a request allocates before it frees its own



class _Fenwick:
    """Prefix sums over segment indices (segment sizes in blocks)."""

    def __init__(self, n: int):
        self.n = n
        self.t = [0] * (n + 1)

    def add(self, i: int, delta: int) -> None:
        i += 1
        t, n = self.t, self.n
        while i <= n:
            t[i] += delta
            i += i & -i

    def prefix(self, i: int) -> int:
        """Sum over indices 0..i."""
        i += 1
        s, t = 0, self.t
        while i > 0:
            s += t[i]
            i -= i & -i
        return s


def output_full_blocks(replay: Replay, output_blocks: bool) -> np.ndarray:
    """Full blocks a request's output fills (cached under ids nothing else names), 0 when outputs are left out."""
    if not output_blocks:
        return np.zeros(replay.requests, dtype=np.int64)
    return (replay.input_tokens + replay.output_tokens) // replay.block_size - np.diff(replay.offsets)


@dataclass(frozen=True, eq=False)
class LruCurve:
    """Hits at every LRU capacity (in blocks) over the measured requests of one replay."""

    block_size: int
    measured_tokens: int
    measured_requests: int
    distances: np.ndarray        # sorted distinct stack distances of measured hittable blocks
    cum_hit_blocks: np.ndarray   # blocks hit at capacity distances[k] + 1
    ideal_blocks: int            # hits of an unbounded cache
    warm_thresholds: np.ndarray  # per measured request an unbounded cache serves: warm at capacities above this
    hit_thresholds: np.ndarray   # per measured request: some hit at capacities above this
    output_blocks: bool
    max_distance: int
    smallest_pool: int           # the pool (num_gpu_blocks) that admits the largest request: below it, vLLM refuses
    choices: dict = field(default_factory=dict)
    # with ``probe_depth``: per measured request an unbounded cache serves past that block (in request order), the
    # request's index, the stack distance of its block at that depth (held at capacities above it) and its ideal hit
    probe_requests: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    probe_distances: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    probe_seen: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def hit_blocks(self, capacity) -> np.ndarray:
        k = np.searchsorted(self.distances, np.asarray(capacity), side="left")
        cum = np.concatenate([[0], self.cum_hit_blocks])
        return cum[k]

    def token_hit_rate(self, capacity) -> np.ndarray:
        """Cached prompt tokens / prompt tokens of the measured requests, at an LRU capacity of ``capacity`` blocks."""
        if not self.measured_tokens:
            return np.zeros(np.shape(capacity))
        return self.hit_blocks(capacity) * self.block_size / self.measured_tokens

    @property
    def ideal_token_hit_rate(self) -> float:
        return self.ideal_blocks * self.block_size / self.measured_tokens if self.measured_tokens else 0.0

    def warm_request_rate(self, capacity) -> np.ndarray:
        """Of the measured requests an unbounded cache serves, the warm ones (replay.warm_depth)."""
        if not self.warm_thresholds.size:
            return np.zeros(np.shape(capacity))
        return np.searchsorted(self.warm_thresholds, np.asarray(capacity), side="left") / self.warm_thresholds.size

    def request_hit_rate(self, capacity) -> np.ndarray:
        """Measured requests with any cached token."""
        if not self.measured_requests:
            return np.zeros(np.shape(capacity))
        return np.searchsorted(self.hit_thresholds, np.asarray(capacity), side="left") / self.measured_requests

    @staticmethod
    def capacity_of_pool(num_blocks) -> np.ndarray:
        return np.maximum(np.asarray(num_blocks) - POOL_OVERHEAD_BLOCKS, 0)

    def at_pool(self, num_blocks) -> np.ndarray:
        """The token hit rate of a vLLM pool of ``num_blocks`` blocks (its num_gpu_blocks)."""
        return self.token_hit_rate(self.capacity_of_pool(num_blocks))

    def pool_for(self, target: float) -> int | None:
        """The smallest pool (num_gpu_blocks) whose token hit rate reaches ``target``; None when none does."""
        need = target * self.measured_tokens / self.block_size
        k = int(np.searchsorted(self.cum_hit_blocks, need - 1e-9, side="left"))
        if k >= self.distances.size:
            return None
        return int(self.distances[k]) + 1 + POOL_OVERHEAD_BLOCKS

    def grid(self, points: int = 200) -> np.ndarray:
        """Pool sizes (blocks) spread evenly on a log scale up to where the curve stops rising."""
        top = max(int(self.distances[-1]) + 1 + POOL_OVERHEAD_BLOCKS if self.distances.size else 4, 4)
        return np.unique(np.geomspace(POOL_OVERHEAD_BLOCKS + 1, top * 1.25, points).astype(np.int64))


def lru_curve(replay: Replay, *, output_blocks: bool = True, progress: Progress | None = None,
              probe_depth: int | None = None) -> LruCurve:
    """One pass over the replay: every measured hittable block's LRU stack distance, as a curve; with
    ``probe_depth`` (a block, 0-based), also each measured request's distance at that block where an unbounded
    cache serves it (the requests warm past a shared prefix of that many blocks: simulate.users.prefix_reuse)."""
    n_req = replay.requests
    seg_of = np.full(max(replay.num_nodes, 1), -1, dtype=np.int64)
    lo = np.zeros(n_req, dtype=np.int64)
    ends = np.diff(replay.offsets)
    cap = replay.hittable_blocks()
    anon = output_full_blocks(replay, output_blocks)
    tree = _Fenwick(n_req)
    total = 0
    starts: list[int] = []
    stops: list[int] = []
    warm: list[int] = []
    any_hit: list[int] = []
    ideal = 0
    probes: list[tuple[int, int, int]] = []
    step = max(1, n_req // 50)
    nodes, offsets = replay.nodes, replay.offsets
    for r in range(n_req):
        p = nodes[offsets[r]:offsets[r + 1]]
        n = p.size
        intervals = []  # (first depth, end depth, segment, blocks above the segment)
        d = 0
        while d < n:
            s = int(seg_of[p[d]])
            if s < 0:
                break
            ps = nodes[offsets[s]:offsets[s + 1]]
            m = min(n, int(ends[s]))
            differ = p[d:m] != ps[d:m]
            k = int(differ.argmax()) if m > d else 0
            e = d + k if m > d and differ[k] else m
            if e == d:
                # the block here was last seen at another depth (a hash id reused off its prefix: a malformed
                # trace, since a prefix hash names its position): not the same prefix, so no hit from here on
                break
            intervals.append((d, e, s, total - tree.prefix(s)))
            d = e
        if r >= replay.measured_from:
            seen = min(d, int(cap[r]))
            ideal += seen
            _measure(intervals, seen, starts, stops)
            if seen:
                any_hit.append(intervals[0][3])
                warm.append(_distance_at(intervals, warm_depth(seen)))
            if probe_depth is not None and seen > probe_depth:
                probes.append((r, _distance_at(intervals, probe_depth), seen))
        for a, e, s, _ in intervals:
            lo[s] = e
            tree.add(s, a - e)
            total -= e - a
        size = n + int(anon[r])
        tree.add(r, size)
        total += size
        seg_of[p] = r
        if progress is not None and r % step == 0:
            progress(r, n_req)
    if progress is not None:
        progress(n_req, n_req)
    curve = _curve(replay, starts, stops, warm, any_hit, ideal, total, output_blocks)
    if not probes:
        return curve
    r_, d_, s_ = (np.asarray(col, dtype=np.int64) for col in zip(*probes))
    return replace(curve, probe_requests=r_, probe_distances=d_, probe_seen=s_)


def _measure(intervals: list, seen: int, starts: list, stops: list) -> None:
    """A measured request's hits: each run of its first ``seen`` blocks, as the stack distances it spans."""
    for a, e, _, above in intervals:
        b = min(e, seen)
        if b > a:
            starts.append(above)
            stops.append(above + b - a)


def _distance_at(intervals: list, depth: int) -> int:
    for a, e, _, above in intervals:
        if a <= depth < e:
            return above + depth - a
    raise AssertionError("depth outside the seen prefix")


def _curve(replay: Replay, starts: list, stops: list, warm: list, any_hit: list, ideal: int, total: int,
           output_blocks: bool) -> LruCurve:
    top = max(stops, default=0) + 1
    diff = np.zeros(top + 1, dtype=np.int64)
    np.add.at(diff, np.asarray(starts, dtype=np.int64), 1)
    np.add.at(diff, np.asarray(stops, dtype=np.int64), -1)
    hist = np.cumsum(diff)[:top]
    where = np.flatnonzero(hist)
    measured = replay.requests - replay.measured_from
    return LruCurve(block_size=replay.block_size, measured_tokens=replay.measured_tokens(), measured_requests=measured,
                    distances=where, cum_hit_blocks=np.cumsum(hist[where]), ideal_blocks=int(ideal),
                    warm_thresholds=np.sort(np.asarray(warm, dtype=np.int64)),
                    hit_thresholds=np.sort(np.asarray(any_hit, dtype=np.int64)), output_blocks=output_blocks,
                    max_distance=int(total), smallest_pool=_smallest_pool(replay, output_blocks), choices=dict(replay.choices))


def _smallest_pool(replay: Replay, output_blocks: bool) -> int:
    tokens = replay.input_tokens + (replay.output_tokens if output_blocks else 0)
    return int((-(-tokens // replay.block_size)).max()) + 1 if replay.requests else 2


# ----------------------------------------------------------------------------------------------
# bounds at chosen sizes
# ----------------------------------------------------------------------------------------------

def _prefix_hits(present: np.ndarray, p: np.ndarray, cap: int) -> int:
    probe = present[p[:cap]]
    miss = np.flatnonzero(~probe)
    return int(miss[0]) if miss.size else int(probe.size)


def _check_capacity(capacity: int) -> None:
    if capacity < 1:
        raise BadInput(f"a cache needs at least one block, got {capacity}")


def fifo_hit_blocks(replay: Replay, capacity: int, *, output_blocks: bool = True) -> int:
    """Measured blocks hit under FIFO at ``capacity`` blocks."""
    _check_capacity(capacity)
    present = np.zeros(max(replay.num_nodes, 1), dtype=bool)
    cap, anon = replay.hittable_blocks(), output_full_blocks(replay, output_blocks)
    biggest = int(np.max(np.diff(replay.offsets) + anon)) if replay.requests else 0
    queue = np.empty(2 * (capacity + biggest) + 1024, dtype=np.int64)
    head = tail = 0
    hits = 0
    for r in range(replay.requests):
        p = replay.nodes_of(r)
        h = _prefix_hits(present, p, int(cap[r]))
        if r >= replay.measured_from:
            hits += h
        new = p[~present[p]]
        present[new] = True
        add = new.size + int(anon[r])
        if tail + add > queue.size:
            queue[: tail - head] = queue[head:tail]
            head, tail = 0, tail - head
        queue[tail:tail + new.size] = new
        queue[tail + new.size:tail + add] = -1
        tail += add
        over = tail - head - capacity
        if over > 0:
            out = queue[head:head + over]
            present[out[out >= 0]] = False
            head += over
    return hits


def _next_uses(replay: Replay) -> np.ndarray:
    """For every block of every request, the next request that uses it (``replay.requests``: never)."""
    out = np.empty(replay.nodes.size, dtype=np.int64)
    last = np.full(max(replay.num_nodes, 1), replay.requests, dtype=np.int64)
    for r in range(replay.requests - 1, -1, -1):
        a, b = replay.offsets[r], replay.offsets[r + 1]
        p = replay.nodes[a:b]
        out[a:b] = last[p]
        last[p] = r
    return out


class _Buckets:
    """Cached blocks grouped by the request that uses them next; eviction takes from the farthest group."""

    def __init__(self) -> None:
        self.groups: dict[int, list[np.ndarray]] = {}
        self.heap: list[int] = []
        self.size = 0

    def take(self, key: int) -> None:
        """Request ``key`` uses every block grouped under it now: they leave the group (and come back regrouped)."""
        arrays = self.groups.pop(key, None)
        if arrays:
            self.size -= sum(a.size for a in arrays)

    def put(self, key: int, blocks: np.ndarray) -> None:
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = []
            heapq.heappush(self.heap, -key)
        group.append(blocks)
        self.size += blocks.size

    def evict(self, n: int, present: np.ndarray) -> None:
        while n > 0:
            key = -self.heap[0]
            group = self.groups.get(key)
            if not group:
                heapq.heappop(self.heap)
                self.groups.pop(key, None)
                continue
            last = group[-1]
            k = min(n, last.size)
            gone = last[last.size - k:]
            present[gone[gone >= 0]] = False
            if k == last.size:
                group.pop()
            else:
                group[-1] = last[: last.size - k]
            self.size -= k
            n -= k


def belady_hit_blocks(replay: Replay, capacity: int, *, output_blocks: bool = True, next_uses: np.ndarray | None = None) -> int:
    """Measured blocks hit by Belady's optimum at ``capacity`` blocks (farthest next use evicted first)."""
    _check_capacity(capacity)
    nu_all = _next_uses(replay) if next_uses is None else next_uses
    present = np.zeros(max(replay.num_nodes, 1), dtype=bool)
    cap, anon = replay.hittable_blocks(), output_full_blocks(replay, output_blocks)
    buckets = _Buckets()
    never = replay.requests
    hits = 0
    for r in range(replay.requests):
        a, b = replay.offsets[r], replay.offsets[r + 1]
        p = replay.nodes[a:b]
        h = _prefix_hits(present, p, int(cap[r]))
        if r >= replay.measured_from:
            hits += h
        buckets.take(r)  # the cached blocks r uses are exactly those grouped under r
        nu = nu_all[a:b]
        cuts = np.flatnonzero(np.diff(nu)) + 1  # next use never falls with depth: runs of one next use
        for run, key in zip(np.split(p, cuts), nu[np.concatenate([[0], cuts])].tolist() if p.size else []):
            buckets.put(int(key), run)
        present[p] = True
        if anon[r]:
            buckets.put(never, np.full(int(anon[r]), -1, dtype=np.int64))
        if buckets.size > capacity:
            buckets.evict(buckets.size - capacity, present)
    return hits


# ----------------------------------------------------------------------------------------------
# what each definition of "hit rate" gives, with an unbounded cache
# ----------------------------------------------------------------------------------------------

def definitions(trace: Trace, replay: Replay, curve: LruCurve) -> list[dict]:
    """Unbounded-cache hit rates of the measured requests under the definitions in use (docs/simulate.md).

    Needs a replay of the trace as it is (no users: their copies are not in the trace's ids)."""
    seen = np.zeros(max(trace.num_ids, 1), dtype=bool)
    size = trace.block_size
    blocks = hit_blocks = tokens = hit_tokens = with_hit = 0
    for i in range(replay.requests):
        ids = trace.ids_of(int(replay.source[i]))
        probe = seen[ids]
        miss = np.flatnonzero(~probe)
        k = int(miss[0]) if miss.size else int(probe.size)
        seen[ids] = True
        if i >= replay.measured_from:
            n = int(replay.input_tokens[i])
            blocks, hit_blocks = blocks + ids.size, hit_blocks + k
            tokens, hit_tokens = tokens + n, hit_tokens + min(k * size, n)
            with_hit += k > 0
    measured = replay.requests - replay.measured_from
    return [
        {"name": "vllm_tokens", "value": curve.ideal_token_hit_rate,
         "meaning": f"cached prompt tokens / prompt tokens, in {replay.block_size}-token engine blocks: full blocks only, "
                    "the last prompt token always recomputed (what vLLM reports as cached_tokens)"},
        {"name": "trace_tokens", "value": hit_tokens / tokens if tokens else 0.0,
         "meaning": f"prompt tokens under a matched prefix of the trace's {size}-token ids / prompt tokens (a matched "
                    "partial last block counts, nothing recomputed)"},
        {"name": "trace_blocks", "value": hit_blocks / blocks if blocks else 0.0,
         "meaning": f"the trace's ids in a matched prefix / all ids (each {size}-token id weighs the same)"},
        {"name": "requests", "value": with_hit / measured if measured else 0.0,
         "meaning": "requests whose first block is cached (any hit at all)"},
    ]
