"""The exact simulator of vLLM's prefix cache (v1 KV cache manager and block pool).

What it reproduces, each with the place in vLLM 0.32 that does it (vllm/v1/core/):

- **chained hashes over full blocks**: a block's id names it and all blocks before it; a partial block
  has none and is never found (kv_cache_utils: hash_block_tokens chains on the parent hash; only full
  blocks are hashed). The replay's ids are chained this way (replay.py).
- **the longest contiguous cached prefix, capped**: the lookup walks the prompt's blocks from the start and
  stops at the first miss; at most (prompt - 1) // block_size blocks may hit, because the last prompt token
  is always recomputed for its logits (kv_cache_manager.get_computed_blocks: max_cache_hit_length =
  num_tokens - 1; single_type_kv_cache_manager.FullAttentionManager.find_longest_cache_hit).
- **the free queue and its LRU**: block 0 is the null block; every other block is free or held. Free blocks
  without a hash sit at the front (freed ones are prepended: reused first), free cached blocks behind them in
  the order they were released; allocation takes from the front, so a cached block is evicted (its hash
  dropped) only when no empty block is left, oldest release first (block_pool.BlockPool.get_new_blocks,
  _maybe_evict_cached_block, free_blocks).
- **pinning**: a hit block is taken out of the free queue (touch) and its reference count raised; blocks
  of running requests are never evicted. A request is admitted only when its new blocks fit in the free
  blocks left after its hits are touched (kv_cache_manager.allocate_slots); otherwise it waits, first come
  first served (the scheduler stops at the first waiting request that does not fit).
- **release tail first**: a finished request's blocks are freed in reverse order, so its last block joins the
  queue first and is evicted first, its first block last (single_type_kv_cache_manager.free: "Free blocks in
  reverse order so that the tail blocks are freed first").
- **no de-duplication**: a block computed again while an identical one is still cached is cached too;
  lookups find the one cached first (block_pool.BlockHashToBlockMap).

What it does not model, and says so: chunked prefill (a prompt is admitted in one step), preemption of
running requests (a request's output blocks are reserved when it is admitted, so decode never runs out of
blocks; a pool too small to admit shows up as waiting instead), recurrent-state blocks of hybrid models,
and tokens of a reply reused by the next prompt (its output blocks are cached under hashes no later prompt
in a trace names: they take pool space and match nothing).
"""

from __future__ import annotations

import collections
import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.limits import MAX_REPLAY_BLOCKS
from servesize.percentile import median
from servesize.progress import Counted as Progress
from servesize.simulate.replay import Replay, warm_turns

UNHASHED = -1  # a block whose contents have no hash (a partial block, or never used)
ANONYMOUS = -2  # a full block hashed under an id no prompt of the trace names (decode output)
MAX_POOL_BLOCKS = 1 << 31



@frozen
class CacheConfig:
    """The engine's pool: ``num_blocks`` as vLLM counts them (its num_gpu_blocks, the null block included)."""

    num_blocks: int
    block_size: int
    output_blocks: bool = True     # a running request's output takes blocks; the full ones are cached (unmatchable)
    max_num_seqs: int | None = None

    def __post_init__(self):
        if not 2 <= self.num_blocks <= MAX_POOL_BLOCKS:
            raise BadInput(f"the pool must have between 2 and {MAX_POOL_BLOCKS:,} blocks (the null block and one more), "
                           f"got {self.num_blocks:,}")
        if self.block_size < 1:
            raise BadInput(f"the block size must be >= 1 token, got {self.block_size}")
        if self.max_num_seqs is not None and self.max_num_seqs < 1:
            raise BadInput(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")

    @property
    def tokens(self) -> int:
        """KV tokens in the pool, the null block left out (what the engine can ever hold)."""
        return (self.num_blocks - 1) * self.block_size


class BlockPool:
    """vLLM's block pool over numpy arrays: reference counts, hashes, the free queue, the hash -> block map.

    The free queue holds cached free blocks in eviction order (``queue[head:tail]``, a block's entry is live while
    ``qpos[block]`` points at it; a touched block's entry goes stale and is skipped); empty free blocks are a stack
    in front of it (``empty``, whose end is the front)."""

    def __init__(self, num_blocks: int, num_nodes: int):
        self.num_blocks = num_blocks
        self.ref = np.zeros(num_blocks, dtype=np.int32)
        self.node_of = np.full(num_blocks, UNHASHED, dtype=np.int32)
        self.block_of = np.full(max(num_nodes, 1), -1, dtype=np.int32)
        self.dups: dict[int, list[int]] = {}
        self.empty: list[int] = list(range(num_blocks - 1, 0, -1))  # block 0 is the null block; pop() is the front
        self.queue = np.empty(4 * num_blocks + 1024, dtype=np.int32)
        self.positions = np.arange(self.queue.size, dtype=np.int32)
        self.qpos = np.full(num_blocks, -1, dtype=np.int32)
        self.head = self.tail = 0
        self.cached_free = 0
        self.evictions = 0
        self.held = 0  # blocks with a reference (pinned by running requests)

    @property
    def free(self) -> int:
        return len(self.empty) + self.cached_free

    def lookup(self, nodes: np.ndarray) -> np.ndarray:
        """The cached blocks of the longest prefix of ``nodes`` that is cached (the walk stops at a miss)."""
        found = self.block_of[nodes]
        miss = np.flatnonzero(found < 0)
        return found[: miss[0]] if miss.size else found

    def idle(self, blocks: np.ndarray) -> np.ndarray:
        """Which of ``blocks`` nobody holds (they sit in the free queue, evictable)."""
        return self.ref[blocks] == 0

    def touch(self, blocks: np.ndarray, idle: np.ndarray) -> None:
        free = blocks[idle]
        self.qpos[free] = -1
        self.cached_free -= free.size
        self.held += free.size
        self.ref[blocks] += 1

    def allocate(self, n: int) -> np.ndarray:
        """n blocks from the front of the free queue: empty ones first, then the oldest cached (evicted)."""
        k = min(n, len(self.empty))
        taken = np.asarray(self.empty[len(self.empty) - k:][::-1], dtype=np.int32)
        del self.empty[len(self.empty) - k:]
        if n > k:
            taken = np.concatenate([taken, self._evict(n - k)])
        self.ref[taken] = 1
        self.held += taken.size
        return taken

    def _evict(self, n: int) -> np.ndarray:
        parts, left = [], n
        while left:
            hi = min(self.tail, self.head + max(2 * left, 256))
            window = self.queue[self.head:hi]
            live = np.flatnonzero(self.qpos[window] == self.positions[self.head:hi])[:left]
            parts.append(window[live])
            left -= live.size
            self.head += int(live[-1]) + 1 if left == 0 else window.size
        blocks = parts[0] if len(parts) == 1 else np.concatenate(parts)
        # their queue entries now lie behind the head, where nothing reads them: qpos needs no reset
        self.cached_free -= blocks.size
        self.evictions += blocks.size
        nodes = self.node_of[blocks]
        real = nodes >= 0
        if real.all():
            self._unhash(blocks, nodes)
        else:
            self._unhash(blocks[real], nodes[real])
        self.node_of[blocks] = UNHASHED
        return blocks

    def _unhash(self, blocks: np.ndarray, nodes: np.ndarray) -> None:
        if not self.dups:
            self.block_of[nodes] = -1
            return
        for b, x in zip(blocks.tolist(), nodes.tolist()):
            others = self.dups.get(x)
            if self.block_of[x] == b:
                self.block_of[x] = others.pop(0) if others else -1
            elif others is not None:
                others.remove(b)
            if others is not None and not others:
                del self.dups[x]

    def cache(self, blocks: np.ndarray, nodes: np.ndarray) -> None:
        """Hash newly full blocks; a block whose hash is already cached becomes a duplicate (vLLM keeps both)."""
        self.node_of[blocks] = nodes
        present = self.block_of[nodes] >= 0
        if not present.any():
            self.block_of[nodes] = blocks
            return
        self.block_of[nodes[~present]] = blocks[~present]
        for b, x in zip(blocks[present].tolist(), nodes[present].tolist()):
            self.dups.setdefault(x, []).append(b)

    def release(self, blocks: np.ndarray) -> None:
        """Free a request's blocks in reverse order: cached ones to the back of the queue, others to the front."""
        rev = blocks[::-1]
        left = self.ref[rev] - 1
        self.ref[rev] = left
        done = left == 0
        freed = rev if done.all() else rev[done]
        self.held -= freed.size
        hashed = self.node_of[freed] != UNHASHED
        if hashed.all():
            self._enqueue(freed)
        else:
            self._enqueue(freed[hashed])
            self.empty.extend(freed[~hashed].tolist())

    def _enqueue(self, blocks: np.ndarray) -> None:
        n = blocks.size
        if self.tail + n > self.queue.size:
            self._compact(n)
        self.queue[self.tail:self.tail + n] = blocks
        self.qpos[blocks] = self.positions[self.tail:self.tail + n]
        self.tail += n
        self.cached_free += n

    def _compact(self, room: int) -> None:
        live = self.queue[self.head:self.tail]
        live = live[self.qpos[live] == self.positions[self.head:self.tail]]
        if live.size + room > self.queue.size:
            self.queue = np.empty(2 * (live.size + room), dtype=np.int32)
            self.positions = np.arange(self.queue.size, dtype=np.int32)
        self.queue[:live.size] = live
        self.qpos[live] = self.positions[:live.size]
        self.head, self.tail = 0, live.size


# ----------------------------------------------------------------------------------------------
# service times
# ----------------------------------------------------------------------------------------------

class ServiceTimes:
    """Seconds a request holds its blocks, from admission to its last token."""

    name = "none"

    def seconds(self, i: int, hit_tokens: int) -> float:
        return 0.0


class RecordedService(ServiceTimes):
    """The trace's own service times (Claude Code's api_time, a measure record's end_s); NaN counts as 0."""

    name = "trace"

    def __init__(self, seconds: np.ndarray):
        self._s = np.nan_to_num(np.asarray(seconds, dtype=np.float64), nan=0.0).clip(min=0.0)

    def seconds(self, i: int, hit_tokens: int) -> float:
        return float(self._s[i])


# ----------------------------------------------------------------------------------------------
# the replay
# ----------------------------------------------------------------------------------------------

@dataclass
class ExactResult:
    """What one exact replay found. Rates count the measured requests (``Replay.measured_from`` on)."""

    num_blocks: int
    block_size: int
    service: str
    output_blocks: bool
    hit_tokens: np.ndarray       # per request (replay order): cached tokens the engine would report
    ideal_tokens: np.ndarray     # what an unbounded cache would have served (same cap)
    admitted_s: np.ndarray       # NaN: never admitted (needs more blocks than the pool has)
    measured_from: int
    input_tokens: np.ndarray
    session: np.ndarray
    arrival_s: np.ndarray
    evictions: int = 0
    evictions_measured: int = 0
    lookups: int = 0             # blocks probed as vLLM probes them (up to and including the first miss)
    blocks_replayed: int = 0     # full prompt blocks that went through lookup, allocation and release
    peak_pinned_blocks: int = 0
    waits: int = 0
    too_large: int = 0
    choices: dict = field(default_factory=dict)

    def _window(self) -> slice:
        return slice(self.measured_from, None)

    @property
    def token_hit_rate(self) -> float:
        w = self._window()
        total = float(self.input_tokens[w].sum())
        return float(self.hit_tokens[w].sum()) / total if total else 0.0

    @property
    def ideal_token_hit_rate(self) -> float:
        w = self._window()
        total = float(self.input_tokens[w].sum())
        return float(self.ideal_tokens[w].sum()) / total if total else 0.0

    @property
    def request_hit_rate(self) -> float:
        """Measured requests with any cached token."""
        h = self.hit_tokens[self._window()]
        return float(np.count_nonzero(h)) / h.size if h.size else 0.0

    @property
    def warm_request_rate(self) -> float:
        """Of the measured requests an unbounded cache would serve, the warm ones (replay.warm_turns)."""
        w = self._window()
        ideal, hit = self.ideal_tokens[w], self.hit_tokens[w]
        could = ideal > 0
        return float(np.count_nonzero(warm_turns(hit[could], ideal[could]))) / int(could.sum()) if could.any() else 0.0

    @property
    def wait_s(self) -> np.ndarray:
        return np.nan_to_num(self.admitted_s - self.arrival_s, nan=0.0)

    def session_warmth(self, limit: int = 10_000) -> list[dict]:
        """Per session (at most ``limit``): its requests' times and warmth (hit / what an unbounded cache serves)."""
        out = []
        order = np.argsort(self.session, kind="stable")
        bounds = np.flatnonzero(np.diff(self.session[order])) + 1
        for part in np.split(order, bounds)[:limit]:
            could = self.ideal_tokens[part] > 0
            idx = part[could]
            warmth = self.hit_tokens[idx] / self.ideal_tokens[idx]
            out.append({"session": int(self.session[part[0]]), "requests": int(part.size),
                        "t_s": np.round(self.arrival_s[idx], 3).tolist(), "warmth": np.round(warmth, 4).tolist(),
                        "mean_warmth": float(warmth.mean()) if warmth.size else None})
        return out

    def summary(self) -> dict:
        waits = self.wait_s[self._window()]
        return {"num_blocks": self.num_blocks, "block_size": self.block_size, "pool_tokens": (self.num_blocks - 1) * self.block_size,
                "service": self.service, "output_blocks": self.output_blocks,
                "token_hit_rate": self.token_hit_rate, "ideal_token_hit_rate": self.ideal_token_hit_rate,
                "request_hit_rate": self.request_hit_rate, "warm_request_rate": self.warm_request_rate,
                "evictions": self.evictions, "evictions_measured": self.evictions_measured,
                "lookups": self.lookups, "blocks_replayed": self.blocks_replayed,
                "peak_pinned_blocks": self.peak_pinned_blocks, "admission_waits": self.waits,
                "wait_s_p50": median(waits) if waits.size else 0.0,
                "wait_s_max": float(waits.max()) if waits.size else 0.0, "too_large": self.too_large}


def _refuse_work(total_blocks: np.ndarray, cfg: CacheConfig) -> None:
    """Refuse before replaying a run that allocates more than MAX_REPLAY_BLOCKS blocks in all (each request's prompt
    and output blocks, every one a step of the replay): the bound on the blocks a replay sends counts prompts
    only, and 600,000 requests of 100,000 output tokens each (6,250 blocks apiece, 3.75 billion in all) ran for
    hours (found by tests/test_fuzz_inputs.py's huge-sizes target)."""
    schedulable = total_blocks[total_blocks <= cfg.num_blocks - 1]  # a larger one is never allocated (too_large)
    work = int(schedulable.sum(dtype=np.int64))
    if work > MAX_REPLAY_BLOCKS:
        out = "prompt and output" if cfg.output_blocks else "prompt"
        raise BadInput(f"this replay allocates {work:,} blocks of {cfg.block_size} tokens ({out} blocks of "
                       f"{schedulable.size:,} requests), past the {MAX_REPLAY_BLOCKS:,} one replay steps through "
                       "(MAX_REPLAY_BLOCKS); use fewer users, a larger --block-size, --no-output-blocks or a part of the trace")


class _Run:
    """One replay through one pool: arrivals in order, finishes from a heap, a first-come-first-served wait line."""

    def __init__(self, replay: Replay, cfg: CacheConfig, service: ServiceTimes):
        self.r, self.cfg, self.service = replay, cfg, service
        self.pool = BlockPool(cfg.num_blocks, replay.num_nodes)
        self.seen = np.zeros(max(replay.num_nodes, 1), dtype=bool)
        self.cap = replay.hittable_blocks()
        out = replay.output_tokens if cfg.output_blocks else np.zeros_like(replay.output_tokens)
        self.total_blocks = -(-(replay.input_tokens + out) // cfg.block_size)
        self.full_out = (replay.input_tokens + out) // cfg.block_size - np.diff(replay.offsets)
        _refuse_work(self.total_blocks, cfg)
        n = replay.requests
        self.hit = np.zeros(n, dtype=np.int64)
        self.ideal = np.zeros(n, dtype=np.int64)
        self.admitted = np.full(n, np.nan)
        self.holding: dict[int, np.ndarray] = {}
        self.finishes: list[tuple[float, int]] = []
        self.waiting: collections.deque[int] = collections.deque()  # FIFO: popped from the left
        self.running = 0
        self.res = ExactResult(cfg.num_blocks, cfg.block_size, service.name, cfg.output_blocks, self.hit, self.ideal,
                               self.admitted, replay.measured_from, replay.input_tokens, replay.session, replay.arrival_s,
                               choices=dict(replay.choices))

    def _ideal(self, i: int, nodes: np.ndarray) -> None:
        probe = self.seen[nodes[: self.cap[i]]]
        unseen = np.flatnonzero(~probe)
        self.ideal[i] = (unseen[0] if unseen.size else probe.size) * self.cfg.block_size
        self.seen[nodes] = True

    def admit(self, i: int, now: float) -> bool:
        """Admit request i if its blocks fit (touch its hits, allocate the rest, hash the full ones)."""
        cfg, pool = self.cfg, self.pool
        if cfg.max_num_seqs is not None and self.running >= cfg.max_num_seqs:
            return False
        nodes = self.r.nodes[self.r.offsets[i]:self.r.offsets[i + 1]]
        cap = int(self.cap[i])
        hits = pool.lookup(nodes[:cap])
        need = int(self.total_blocks[i]) - hits.size
        idle = pool.idle(hits)
        if need > pool.free - int(np.count_nonzero(idle)):
            return False
        pool.touch(hits, idle)
        new = pool.allocate(need)
        n_prompt = nodes.size - hits.size
        pool.cache(new[:n_prompt], nodes[hits.size:])
        n_out = int(self.full_out[i])
        if n_out > 0:
            pool.node_of[new[n_prompt:n_prompt + n_out]] = ANONYMOUS
        self.holding[i] = np.concatenate([hits, new])
        self.hit[i] = hits.size * cfg.block_size
        self.admitted[i] = now
        self.running += 1
        res = self.res
        res.lookups += min(hits.size + 1, cap)
        res.blocks_replayed += nodes.size
        res.peak_pinned_blocks = max(res.peak_pinned_blocks, pool.held)
        seconds = self.service.seconds(i, hits.size * cfg.block_size)
        if seconds > 0:
            heapq.heappush(self.finishes, (now + seconds, i))
        else:
            self.finish(i)
        return True

    def finish(self, i: int) -> None:
        self.pool.release(self.holding.pop(i))
        self.running -= 1

    def drain(self, until: float) -> None:
        """Finish everything due by ``until``; after each finish, admit who waits (in order) while they fit."""
        while self.finishes and self.finishes[0][0] <= until:
            t, i = heapq.heappop(self.finishes)
            self.finish(i)
            self._admit_waiting(t)

    def _admit_waiting(self, now: float) -> None:
        while self.waiting and self.admit(self.waiting[0], now):
            self.waiting.popleft()

    def arrive(self, i: int) -> None:
        self._ideal(i, self.r.nodes[self.r.offsets[i]:self.r.offsets[i + 1]])
        if self.total_blocks[i] > self.cfg.num_blocks - 1:
            self.res.too_large += 1  # needs more blocks than the pool has: vLLM never schedules it
            return
        if self.waiting or not self.admit(i, float(self.r.arrival_s[i])):
            self.waiting.append(i)
            self.res.waits += 1


def replay_exact(replay: Replay, cfg: CacheConfig, service: ServiceTimes | None = None,
                 progress: Progress | None = None) -> ExactResult:
    """Replay every request through the pool, in arrival order (finishes due first), and return what it found."""
    if cfg.block_size != replay.block_size:
        raise BadInput(f"the replay is in {replay.block_size}-token blocks, the pool in {cfg.block_size}-token ones")
    run = _Run(replay, cfg, service or ServiceTimes())
    n = replay.requests
    step = max(1, n // 50)
    for i in range(n):
        if i == replay.measured_from:
            run.res.evictions_measured = -run.pool.evictions
        run.drain(float(replay.arrival_s[i]))
        run.arrive(i)
        if progress is not None and i % step == 0:
            progress(i, n)
    run.drain(math.inf)
    while run.waiting:  # nothing runs and someone still waits: only if it can never fit
        run.res.too_large += 1
        run.waiting.popleft()
        run._admit_waiting(math.inf)
    run.res.evictions = run.pool.evictions
    run.res.evictions_measured += run.pool.evictions
    if progress is not None:
        progress(n, n)
    return run.res


class ModelledService(ServiceTimes):
    """Service times from servesize's own models of the deployment, each request priced alone on the engine:
    prefill FLOPs of its uncached tokens over its cached ones (planning.prefill), then its output at the
    memory-bandwidth roofline for its context (planning.decode). Batching interference is not priced."""

    name = "model"

    def __init__(self, prefill, decode, input_tokens: np.ndarray, output_tokens: np.ndarray):
        self.prefill, self.decode = prefill, decode
        self.input_tokens, self.output_tokens = input_tokens, output_tokens
        contexts = (input_tokens + output_tokens / 2.0).astype(np.float64)
        speed = decode.per_user_tokens_per_s(decode.step_bytes(contexts[:, None])) if contexts.size else contexts
        self._decode_s = np.where(output_tokens > 0, output_tokens / np.maximum(speed, 1e-9), 0.0)

    def seconds(self, i: int, hit_tokens: int) -> float:
        new = float(self.input_tokens[i] - hit_tokens)
        return float(self.prefill.seconds(new, float(hit_tokens))) + float(self._decode_s[i])
