"""A step-level model of vLLM's V1 engine: its scheduler, its prefix cache and its step times, at N users.

What it reproduces (vllm/v1/core/sched/scheduler.py ``Scheduler.schedule``, vLLM 0.8 to 0.11):

- **continuous batching**: every step schedules the running requests first, in order, then the waiting ones
  first come first served; a request joins or leaves the batch at any step;
- **chunked prefill**: a step carries at most ``max_num_batched_tokens`` new tokens; a running decode takes
  one, a prefill takes what is left of the budget, so a long prompt spreads over ceil(L / budget) steps (the
  KV of the chunks already done stays, and their full blocks are cached as they fill);
- **max_num_seqs**: no waiting request is admitted while that many run;
- **the exact prefix cache** of cache.py (``BlockPool``: the free queue, LRU eviction, hits pinned, blocks freed
  tail first, the last prompt token recomputed); a waiting request is admitted only when its blocks fit;
- **recurrent states of hybrid models** (GDN / Mamba layers, vLLM's MambaManager in 'align' mode): a running
  request holds its state blocks in every state group beside its attention blocks; a prefill's chunks are cut to
  whole blocks, its prompt's last full block's end forced (Scheduler._mamba_block_aligned_split), and the state
  at every chunk end on a block boundary stays cached (one block per group, released before the attention
  blocks, so evicted first); a later prompt hits only up to a block whose state is cached
  (``EngineConfig.state_groups``); in 'none' mode nothing is hit;
- **a reply's blocks**: hashed as they fill (vLLM caches a request's full blocks, its output's too); where the
  sessions were generated from a workload, whose every prompt repeats the reply before it, under the ids the
  session's next prompt gives them, so the next turn hits them; a trace's ids do not say what its next prompt
  repeats, so there they are cached under ids nothing names;
- **a hit's last block dropped** where drafts read the target's hidden states (MTP, EAGLE: vLLM computes it
  again, ``EngineConfig.drop_hit_block``);
- **preemption by recompute**: a running request that needs a block when none is free preempts the request
  scheduled last (``self.running.pop()``), whose blocks are freed (still cached: its resumed prefill may hit
  them) and which goes back to the front of the waiting queue; no waiting request is admitted in a step that
  preempted;
- **step times from the one step model** (planning/step_model.py ``StepModel``): a step's decoders cost what
  planning/decode.py's DecodeSetup reads and computes for their contexts (weights once, KV per context token,
  compute where priced, MTP's speedup as tokens per step), its prefill chunks what planning/prefill.py's
  PrefillSetup computes for each chunk over its cached part; a mixed step is priced by the step model's rule
  (``step.mixed``); a request's fixed cost (``step.request_fixed_s``: the API server turning the engine's tokens
  into the stream the client reads) delays what the client sees of it, its first token and its last, by that
  much: the scheduler sees the request when it is sent, and the user's next request follows the last token's
  arrival.

Users are closed-loop: each user sends its next request a pause after its previous answer ends, the pause
the trace had there (its gap less the trace's own service time; one over ``AWAY_AFTER_S`` is the user away and is
cut to the workload's mean think time beside a plan, the pause the plan cycles on, which also parts a user's
sessions: ReplayOptions.resume_s, simulate/replay.py ``away_shift``) or the workload's think-time distribution
(sessions generated from a workload, whose subagent requests are sent with their turn and gate nothing:
``riding``). A step in which nothing but decoding happens repeats until the next
arrival, finish or block boundary, and is advanced in one vectorised jump (the same rooflines, step by step).

Reported: time to first token (arrival to the end of the step that finishes its prefill, queueing included)
and each request's decode speed (its output after the first token over the time it took), p50 and p95, over
the requests that arrive after the warm-up. With N users (replay.py's ``--users``: each runs drawn sessions back
to back) only the requests sent before the first user runs out of sessions are measured, the warm-up being the
first half of that window, and the run stops once they are answered: after it fewer users send; a window that
measures fewer than MIN_MEASURED_REQUESTS draws more sessions per user and runs again (``measured_enough``). (Until
2026-12-05 the window was the run's second half, through which users ran out one by one: Llama 3.1 70B on four
H100s at 44 batch users measured 0.92 requests/s, 1.83/s in the window, and the users found were too many.)
And the users at which the comfort SLO (DESIGN.md: warm, the decode floor at p95 of requests, the TTFT budget at
p95) breaks, by a bounded search over N.

Not modelled: CUDA graphs' padding, the async scheduler's overlap, priorities, the V1 ``long_prefill_token
_threshold``, speculative decoding's rejected drafts (MTP is its expected tokens per step), the states a hybrid
model caches at the block boundaries its decode crosses on a trace's sessions (whose replies no later prompt
names), the blocks of sliding-window groups and of a second full-attention group (every block of the
pool holds one block of tokens of the one attention group), CPU offload, pipeline parallelism and routing across
data-parallel replicas (one replica).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from servesize.assumptions import assumption
from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.jsonable import Record
from servesize.limits import MAX_ENGINE_REQUESTS, MAX_ENGINE_STEPS, MAX_ENGINE_USERS, MAX_REPLAY_SESSIONS
from servesize.percentile import median, percentiles
from servesize.planning.interference import BASELINE_SLACK, allowed_slow_share
from servesize.progress import Progress
from servesize.simulate.cache import ANONYMOUS, UNHASHED, BlockPool
from servesize.simulate.replay import Replay, ReplayOptions, build_replay, warm_turns
from servesize.simulate.traces import Trace

JUMP_STEPS = 512        # decode-only steps advanced in one vectorised jump, at most
# sessions generated from a workload (simulate/synthetic.py): each prompt repeats the reply before it, so the
# engine hashes a reply's blocks under the ids the next prompt gives them; a trace's ids do not say
REPLIES_REUSED = "synthetic"
DEFAULT_TTFT_PERCENTILE = 95.0
DEFAULT_DECODE_PERCENTILE = 95.0  # the decode floor holds for this share of requests (their p5 speed)
DEFAULT_WARM_SHARE = 0.95         # returning turns that are warm (replay.WARM_HIT_SHARE of their prefix cached)
DEFAULT_WARMUP = 0.5              # requests arriving in the first half of the simulated time are not counted
# a trace of lone requests sent at the rate N users make (engine_users): runs at most, each at the rate its
# predecessor's mean response gives, and the change in rate below which the run is kept. A numerical choice: on
# Mooncake's traces the second run's rate was within 1% of the first correction (27B: 1.62 s then 1.61 s of
# response at 6 users, 4.16 s then 3.93 s at 13), and the users found on the six Mooncake rows of
# scripts/engine_validation.py are the same at 3 runs and at 5
RATE_PASSES = 3
RATE_TOLERANCE = 0.01
# N closed-loop users are measured until the first of them runs out of drawn sessions, and the comfort SLO judges
# 5% tails of what was measured: on n requests a 5% share's standard error is sqrt(0.05 x 0.95 / n), 2.0 points at
# the 116 requests the Claude Code trace's 20 users measured with five sessions each (the replay's default draw),
# 0.7 at this many. A statistical choice: a run that measures fewer draws more sessions per user and runs again
# (MEASURE_PASSES runs at most; each stops where the first user runs out, so its cost follows what it measures)
MIN_MEASURED_REQUESTS = 1000
MEASURE_PASSES = 3



# ----------------------------------------------------------------------------------------------
# the engine's settings and its step times
# ----------------------------------------------------------------------------------------------

@frozen
class EngineConfig:
    """One replica's scheduler and pool: ``num_blocks`` as vLLM counts them (the null block included)."""

    num_blocks: int
    block_size: int
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    output_blocks: bool = True
    # requests sent at the same instant reach the scheduler this far apart (the API server takes them one at a time),
    # so an idle engine starts a step with the first alone, as the real engine does (data/assumptions.toml)
    handoff_s: float = field(default_factory=lambda: float(assumption("engine.handoff_s")))
    # hybrid models (GDN / Mamba layers) share the pool with their recurrent states (engine/pool.py): in each of
    # ``state_groups`` groups a running request holds ``state_blocks_per_group`` blocks (its running state, the last
    # block-boundary state, checkpoint and draft blocks: the pool's blocks per request for the group). With
    # ``state_cached`` ('align' mode) the state at each block boundary a chunk ends on stays cached, one block per
    # group, and a later prompt hits only up to a block whose state is cached; without it ('none')
    # nothing of a hybrid model's prompt is ever hit (vLLM: MambaManager, HybridKVCacheCoordinator)
    state_groups: int = 0
    state_blocks_per_group: int = 0
    state_cached: bool = True
    # drafts that read the target's hidden states (MTP, EAGLE) make vLLM drop a prefix hit's last block, computed
    # again (Deployment.drops_hit_block, engine/speculative.py BLOCK_DROP_METHODS)
    drop_hit_block: bool = False
    # --no-enable-prefix-caching: vLLM hashes no block, so no prompt is ever hit (a random prefix, a ready check's)
    prefix_caching: bool = True

    def __post_init__(self):
        if not 2 <= self.num_blocks <= 1 << 31:
            raise BadInput(f"the pool must have between 2 and {1 << 31:,} blocks, got {self.num_blocks:,}")
        if self.block_size < 1:
            raise BadInput(f"the block size must be >= 1 token, got {self.block_size}")
        if self.max_num_seqs < 1:
            raise BadInput(f"--max-num-seqs must be >= 1, got {self.max_num_seqs}")
        if self.max_num_batched_tokens < 1:
            raise BadInput(f"--max-num-batched-tokens must be >= 1, got {self.max_num_batched_tokens}")
        if not (math.isfinite(self.handoff_s) and 0 <= self.handoff_s <= 1):
            raise BadInput(f"the API server's hand-off must be in [0, 1] s per request, got {self.handoff_s!r}")
        if self.state_groups < 0 or (self.state_groups and self.state_blocks_per_group < 1 + self.state_cached):
            raise BadInput(f"a hybrid model's state takes at least {1 + self.state_cached} blocks per group of a running "
                           f"request, got {self.state_groups} groups of {self.state_blocks_per_group}")

    @property
    def state_blocks_running(self) -> int:
        """Blocks a running request holds for its recurrent state, every group together (0: no state layers)."""
        return self.state_groups * self.state_blocks_per_group


def config_of(report: Any) -> EngineConfig:
    """The engine simulator's replica for the deployment a memory report sized (engine/memory.py): its pool's
    blocks, its recurrent-state groups, and its scheduler's --max-num-seqs and --max-num-batched-tokens (vLLM's
    defaults where the deployment leaves them unset)."""
    from servesize.model.layers import STATE_KINDS

    pool, dep = report.pool, report.deployment
    states = [g for g in pool.groups if g.kind in STATE_KINDS]
    return EngineConfig(pool.num_blocks, pool.block_size, int(dep.max_num_seqs or 256),
                        int(dep.max_num_batched_tokens or 8192), state_groups=len(states),
                        state_blocks_per_group=max((g.blocks_per_request for g in states), default=0),
                        state_cached=dep.mamba_cache_mode == "align", drop_hit_block=dep.drops_hit_block,
                        prefix_caching=dep.enable_prefix_caching is not False)


# ----------------------------------------------------------------------------------------------
# the result
# ----------------------------------------------------------------------------------------------

def _pct(x: np.ndarray, q: float) -> float | None:
    return percentiles(x, (q,))[0] if x.size else None


@dataclass
class EngineRun:
    """One simulation at one user count: per request, and the engine's counters."""

    users: int
    arrival_s: np.ndarray
    first_token_s: np.ndarray     # NaN: never answered (too large for the pool, or the run stopped)
    finish_s: np.ndarray
    hit_tokens: np.ndarray        # cached tokens at the request's (first) admission
    ideal_tokens: np.ndarray      # what an unbounded cache would have served
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    preemptions: np.ndarray       # per request
    steps: int = 0
    prefill_steps: int = 0
    decode_only_steps: int = 0
    jumps: int = 0
    events: int = 0               # arrivals + admissions + finishes + preemptions
    prefill_chunks: int = 0
    mixed_steps: int = 0          # steps that carry prefill chunks and decoders together (a decode's stall)
    too_large: int = 0
    clock_s: float = 0.0
    busy_s: float = 0.0
    decoders_per_step: list[int] = field(default_factory=list)  # a sample (one per step up to a cap)
    step_seconds: list[float] = field(default_factory=list)     # the same steps' durations (inter-token times)
    stopped: bool = False         # MAX_ENGINE_STEPS reached
    warmup: float = DEFAULT_WARMUP
    # N closed-loop users: when the first of them ran out of requests (inf: the trace's own sessions, or open loop).
    # Only what was sent before it is measured: after it fewer users send, and the load falls
    window_end_s: float = math.inf
    # per request, whether it returns to a session (``returning_turns``); None: every request is judged
    returning: np.ndarray | None = None
    # the rate the trace's arrivals were scaled to (engine_users' open loop), and whether the run before it measured
    # a response that gives the same rate within RATE_TOLERANCE (False: RATE_PASSES ran out first); None: as replayed
    sent_rate_per_s: float | None = None
    rate_settled: bool | None = None
    # N closed-loop users (until_first_out): the sessions each drew and the requests drawn in all (measured_enough
    # draws more where the window measured too few); None and 0 otherwise
    sessions_per_user: int | None = None
    drawn_requests: int = 0

    def mean_response_s(self) -> float | None:
        """The measured requests' mean time from sending to their last token (None when none finished)."""
        m = self.measured() & np.isfinite(self.finish_s)
        return float(np.mean(self.finish_s[m] - self.arrival_s[m])) if m.any() else None

    def _window(self) -> tuple[float, np.ndarray]:
        """The measured window's end, and which requests were sent within it after the warm-up's share of it."""
        end = min(self.clock_s, self.window_end_s)
        return end, (self.arrival_s >= self.warmup * end) & (self.arrival_s <= end)

    def measured(self) -> np.ndarray:
        """The requests measured: answered, and sent within the window (after the warm-up's share of it)."""
        return np.isfinite(self.first_token_s) & self._window()[1]

    @property
    def ttft_s(self) -> np.ndarray:
        m = self.measured()
        return self.first_token_s[m] - self.arrival_s[m]

    @property
    def decode_tok_s(self) -> np.ndarray:
        m = self.measured() & np.isfinite(self.finish_s) & (self.output_tokens > 1)
        span = self.finish_s[m] - self.first_token_s[m]
        ok = span > 0
        return (self.output_tokens[m][ok] - 1) / span[ok]

    @property
    def warm_share(self) -> float | None:
        """Of the measured returning turns an unbounded cache would serve, the warm share (replay.warm_turns; the
        comfort SLO's "95% of returning turns warm"): a session's first request, which can hit only what other
        sessions share (a system prompt), is no returning turn (``returning_turns``). None when there is no such
        turn (nothing measured, or no turn has a prefix to keep): never 100% from no turns."""
        m = self.measured() & (self.ideal_tokens > 0)
        if self.returning is not None:
            m &= self.returning
        return float(np.mean(warm_turns(self.hit_tokens[m], self.ideal_tokens[m]))) if m.any() else None

    @property
    def token_hit_rate(self) -> float:
        m = self.measured()
        total = float(self.input_tokens[m].sum())
        return float(self.hit_tokens[m].sum()) / total if total else 0.0

    @property
    def sent_per_s(self) -> float | None:
        """Requests sent per second in the measured window (the load the comfort SLO is judged at); None when the
        window is empty."""
        end, sent = self._window()
        span = end * (1.0 - self.warmup)
        if not span > 0:
            return None
        return float(np.count_nonzero(sent) / span)

    def summary(self) -> dict:
        ttft, speed = self.ttft_s, self.decode_tok_s
        return {"users": self.users, "requests": int(self.arrival_s.size), "measured": int(self.measured().sum()),
                "window_end_s": float(self.window_end_s) if math.isfinite(self.window_end_s) else None,
                "sessions_per_user": self.sessions_per_user, "sent_per_s": self.sent_per_s, "scaled_to_per_s": self.sent_rate_per_s,
                "rate_settled": self.rate_settled, "mean_response_s": self.mean_response_s(),
                "ttft_s_p50": _pct(ttft, 50), "ttft_s_p95": _pct(ttft, 95),
                "decode_tok_s_p50": _pct(speed, 50), "decode_tok_s_p5": _pct(speed, 5),
                "warm_share": self.warm_share, "token_hit_rate": self.token_hit_rate,
                "preemptions": int(self.preemptions.sum()), "too_large": self.too_large, "steps": self.steps,
                "prefill_steps": self.prefill_steps, "mixed_steps": self.mixed_steps, "events": self.events,
                "jumps": self.jumps,
                "simulated_s": self.clock_s, "busy_share": self.busy_s / self.clock_s if self.clock_s else 0.0,
                "decoders_per_step_p50": _pct(np.asarray(self.decoders_per_step), 50),
                "decoders_per_step_p95": _pct(np.asarray(self.decoders_per_step), 95), "stopped": self.stopped}


# ----------------------------------------------------------------------------------------------
# the engine
# ----------------------------------------------------------------------------------------------

_SAMPLE_STEPS = 200_000  # decoders per step are kept for at most this many steps (the percentiles' sample)


class _Engine:
    """The scheduler's state over one replay: requests by replay index, users closed-loop."""

    pulled_state = False  # a hybrid's state at a prompt's last full block arrives with the prompt (a decode instance)

    def __init__(self, replay: Replay, cfg: EngineConfig, times, pauses: np.ndarray, starts: dict[int, float],
                 order: dict[int, list[int]], warmup: float):
        if cfg.block_size != replay.block_size:
            raise BadInput(f"the replay is in {replay.block_size}-token blocks, the engine in {cfg.block_size}-token ones")
        self.r, self.cfg, self.t = replay, cfg, times
        n = replay.requests
        # 'align' mode: the recurrent state cached at a prompt's block k is a node of its own in each state group g,
        # id num_nodes x (1 + g) + the block's node (``_state_ids``)
        self.states = cfg.state_groups
        self.align = bool(self.states and cfg.state_cached)
        if self.align and (1 + self.states) * replay.num_nodes >= 1 << 31:
            raise RunTooLarge(f"{replay.num_nodes:,} distinct blocks and their states in {self.states} groups are "
                              "past the simulator's node ids: replay fewer sessions")
        self.pool = BlockPool(cfg.num_blocks, replay.num_nodes * (1 + self.states if self.align else 1))
        self.cap = replay.hittable_blocks()
        if not cfg.prefix_caching or (self.states and not cfg.state_cached):  # caching off, or 'none' mode (a
            self.cap = np.zeros_like(self.cap)                                 # hybrid model's): nothing is hit
        self.state_kept = np.zeros(replay.num_nodes if self.align else 0, dtype=bool)  # a block's state ever cached
        self.state_run: dict[int, list[int]] = {}              # a running request's own state blocks (unhashed)
        self.boundary: dict[int, tuple[int, np.ndarray]] = {}  # its last block-boundary state: (blocks before, ids)
        self.seen = np.zeros(max(replay.num_nodes, 1), dtype=bool)
        self.prompt = replay.input_tokens.astype(np.int64)
        self.out = replay.output_tokens.astype(np.int64).clip(min=1)
        self.target = self.prompt.copy()          # tokens to (re)compute before decoding: prompt (+ output so far)
        self.computed = np.zeros(n, dtype=np.int64)
        self.generated = np.zeros(n, dtype=np.float64)
        self.blocks: dict[int, list[int]] = {}
        self.nblocks = np.zeros(n, dtype=np.int64)  # len(self.blocks[i]), kept beside it for the vectorised steps
        self.cached_upto = np.zeros(n, dtype=np.int64)  # prompt nodes already hashed into the pool
        self.pauses, self.order = pauses, order
        self.user_of = closed_loop_users(replay)
        self.fixed_s = float(getattr(times, "request_fixed_s", 0.0))  # the engine's token -> the client's
        self.rides = riding(replay)
        self.next_of = {u: -1 for u in order}
        self.arrivals: list[tuple[float, int]] = []
        for u in order:
            if order[u]:
                self._send(u, 0, starts[u])
        self.waiting: deque[int] = deque()
        self.running: list[int] = []
        self.now = 0.0
        self.handed = -math.inf  # when the API server last handed a request to the scheduler (cfg.handoff_s)
        # no request of this engine's arrives before now, but one from another engine may arrive at this time or
        # later (simulate/disaggregated.py: a decode instance's requests come from prefill instances): a jump of
        # decode steps stops before it, as before an arrival (inf: one engine alone)
        self.horizon = math.inf
        self.run = EngineRun(users=len(order), arrival_s=np.full(n, np.nan), first_token_s=np.full(n, np.nan),
                             finish_s=np.full(n, np.nan), hit_tokens=np.zeros(n, dtype=np.int64),
                             ideal_tokens=np.zeros(n, dtype=np.int64), input_tokens=self.prompt, output_tokens=self.out,
                             preemptions=np.zeros(n, dtype=np.int64), warmup=warmup,
                             returning=returning_turns(replay))
        self.admitted_once = np.zeros(n, dtype=bool)
        self.blocked = False  # the head of the waiting queue did not fit in the last step (blocks or seats), so decode
                              # steps may be jumped until a request finishes
        # N users running drawn sessions until they run out (replay.py's --users, uncut: not a trace's own sessions,
        # nor a benchmark's slots, which send a fixed list): when the first of them runs out of requests
        self.until_first_out = bool(replay.choices.get("until_first_out"))
        self.first_out = math.inf
        self.follows = _next_in_session(replay) if replay.choices.get("format") == REPLIES_REUSED else None

    # -- blocks ---------------------------------------------------------------------------------
    def _nodes(self, i: int) -> np.ndarray:
        return self.r.nodes[self.r.offsets[i]:self.r.offsets[i + 1]]

    def _blocks_for(self, tokens: float) -> int:
        return -(-int(math.ceil(tokens)) // self.cfg.block_size)

    def _grow(self, i: int, tokens: float) -> bool:
        """Blocks for ``tokens`` KV tokens of request i; False when the pool has too few free."""
        need = self._blocks_for(tokens) - len(self.blocks[i])
        if need <= 0:
            return True
        if need > self.pool.free:
            return False
        self.blocks[i].extend(self.pool.allocate(need).tolist())
        self.nblocks[i] += need
        return True

    def _hash_prompt(self, i: int) -> None:
        """Hash the prompt blocks request i has computed (full blocks as they fill; all when the prompt is done)."""
        nodes = self._nodes(i)
        done = nodes.size if self.computed[i] >= self.prompt[i] else min(int(self.computed[i]) // self.cfg.block_size,
                                                                           nodes.size)
        k0 = int(self.cached_upto[i])
        if done > k0:
            held = np.asarray(self.blocks[i][k0:done], dtype=np.int32)
            fresh = self.pool.node_of[held] == UNHASHED
            if fresh.any():
                self.pool.cache(held[fresh], nodes[k0:done][fresh])
            self.cached_upto[i] = done
        if self.align and nodes.size:
            c, bs = int(self.computed[i]), self.cfg.block_size
            if c % bs == 0 and 0 < c // bs <= nodes.size:  # a chunk ended on a block boundary: its state is kept
                self._cache_state(i, nodes, c // bs)
            elif self.pulled_state and done == nodes.size and c >= done * bs:  # a decode instance's pulled prompt:
                self._cache_state(i, nodes, done)                               # its state arrived with it

    # -- recurrent states (hybrid models) -------------------------------------------------------
    def _state_ids(self, nodes: np.ndarray) -> np.ndarray:
        """The state nodes of these blocks' ends: one row per state group."""
        groups = np.arange(1, self.states + 1, dtype=np.int64)[:, None]
        return self.r.num_nodes * groups + nodes.astype(np.int64)[None, :]

    def _state_hit(self, nodes: np.ndarray, hits: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """The attention hit cut back to the last block whose state is cached in every state group, and that
        state's blocks (vLLM's MambaManager.find_longest_cache_hit: the rightmost cached state within the
        attention's hit; the coordinator takes the shorter): no such block, no hit."""
        found = self.pool.block_of[self._state_ids(nodes[:hits.size])]
        whole = np.flatnonzero((found >= 0).all(axis=0))
        if not whole.size:
            return hits[:0], None
        k = int(whole[-1])
        return hits[:k + 1], found[:, k].astype(np.int32)

    def _cache_state(self, i: int, nodes: np.ndarray, at: int) -> None:
        """Request i's prefill stopped after block ``at`` of its prompt: the state there is kept in a block of
        each state group, hashed, and the boundary state it held before is released (still cached). With no
        block free for it, that boundary keeps no state (vLLM would preempt; rare, and said here)."""
        held = self.boundary.get(i)
        if held is not None and held[0] >= at:
            return
        if self.pool.free < self.states:
            return
        node = nodes[at - 1:at]
        self.state_kept[node] = True
        new = self.pool.allocate(self.states)
        self.pool.cache(new, self._state_ids(node)[:, 0].astype(np.int32))
        if held is not None:
            self.pool.release(held[1])
        self.boundary[i] = (at, new)

    def _aligned(self, i: int, computed: int, new: int) -> int:
        """'align' mode cuts a prefill's chunk so the state lands on a block boundary (vLLM's Scheduler
        ._mamba_block_aligned_split): whole blocks while the chunk ends before the last full block of what is
        to compute, that block's end where the chunk would pass it, the rest once past it; 0: nothing this step.
        A block larger than a step's budget is prefilled in uncut chunks (the state is kept where one ends on a
        block boundary)."""
        if not self.align or self.cfg.block_size > self.cfg.max_num_batched_tokens:
            return new
        bs, total = self.cfg.block_size, int(self.target[i])
        last = total - total % bs
        if self.cfg.drop_hit_block:  # the next hit drops its last block: the state it resumes from is a block before
            last = max(last - bs, 0)
        if computed + new < last:
            return new // bs * bs
        if computed < last < computed + new:
            return last - computed
        return new

    def _free_state(self, i: int) -> None:
        """Release request i's state blocks before its attention blocks (vLLM frees the state groups first, each
        tail first): its own running blocks to the front of the free queue, its boundary state to the back."""
        own = self.state_run.pop(i, [])
        held = self.boundary.pop(i, None)
        blocks = (held[1].tolist() if held is not None else []) + own
        if blocks:
            self.pool.release(np.asarray(blocks, dtype=np.int32))

    def _free(self, i: int) -> None:
        """Free request i's blocks tail first; its full output blocks stay cached: under the ids the session's next
        prompt gives them where the trace's next prompt carries the reply (sessions generated from a workload),
        else under ids nothing names."""
        held = np.asarray(self.blocks[i], dtype=np.int32)
        nodes = self._nodes(i)
        full = int(self.prompt[i] + self.generated[i]) // self.cfg.block_size if self.cfg.output_blocks else 0
        tail = held[nodes.size:full] if full > nodes.size else held[:0]
        if tail.size:
            named = self._name_reply(i, nodes, tail)
            unhashed = tail[named:][self.pool.node_of[tail[named:]] == UNHASHED]
            self.pool.node_of[unhashed] = ANONYMOUS
        if self.states:
            self._free_state(i)
        del self.blocks[i]
        self.nblocks[i] = 0
        self.pool.release(held)
        self.cached_upto[i] = 0

    def _name_reply(self, i: int, nodes: np.ndarray, tail: np.ndarray) -> int:
        """Hash request i's full reply blocks under the ids its session's next prompt gives them, where that prompt
        extends this one (vLLM hashes a reply's blocks as they fill, and the next turn, which repeats the reply, hits
        them); a hybrid model's state at each of their ends is kept too (its decode crossed those boundaries). How many
        of ``tail`` were named (0: no next prompt, or one that does not extend this one)."""
        j = -1 if self.follows is None else int(self.follows[i])
        if j < 0 or not nodes.size:
            return 0
        after = self._nodes(j)
        if after.size <= nodes.size or after[nodes.size - 1] != nodes[-1]:
            return 0
        names = after[nodes.size:nodes.size + tail.size]
        fresh = self.pool.node_of[tail[:names.size]] == UNHASHED
        self.pool.cache(tail[:names.size][fresh], names[fresh])
        self.seen[names] = True
        for at in range(nodes.size + 1, nodes.size + names.size + 1) if self.align else ():
            self._cache_state(i, after, at)  # each block boundary the decode crossed kept its state
        return int(names.size)

    # -- scheduling -----------------------------------------------------------------------------
    def _preempt(self) -> int:
        victim = self.running.pop()
        self._free(victim)
        self.computed[victim] = 0
        self.target[victim] = self.prompt[victim] + int(self.generated[victim])  # recompute prompt + output so far
        self.waiting.appendleft(victim)
        self.run.preemptions[victim] += 1
        self.run.events += 1
        return victim

    def _schedule_running(self, budget: int) -> tuple[dict[int, int], int, bool]:
        """The running requests' tokens this step, in the running order, until the budget is spent: a prefill's
        chunk (at most what is left of the budget) or a decode's one token, each grown the blocks it needs."""
        running = self.running
        if not running or budget <= 0:
            return {}, budget, False
        if self.align:  # 'align' mode cuts each prefill's chunk to its blocks: the loop below does it request by request
            return self._schedule_running_one_by_one(budget)
        # all at once where the free blocks suffice: the same chunks, and the same blocks taken from the pool's
        # front in the running order, as the request-by-request loop below
        idx = np.asarray(running, dtype=np.int64)
        left = self.target[idx] - self.computed[idx]
        want = np.where(left > 0, left, 1)
        spent = np.cumsum(want)
        n = int(np.searchsorted(spent, budget, side="right"))  # rows served whole
        news = want[:n]
        rest = budget - (int(spent[n - 1]) if n else 0)
        if n < idx.size and rest > 0:  # a prefill's chunk cut to the budget's rest (a decode's 1 would have fit)
            news = np.append(news, rest)
        rows = idx[:news.size]
        tokens = np.where(left[:news.size] > 0, self.computed[rows] + news,
                          self.prompt[rows] + self.generated[rows] + self.t.tokens_per_decode_step)
        bs, held = self.cfg.block_size, self.blocks
        need = np.maximum(-(-np.ceil(tokens).astype(np.int64) // bs) - self.nblocks[rows], 0)
        total = int(need.sum())
        if total <= self.pool.free:
            if total:
                taken = self.pool.allocate(total).tolist()
                at = 0
                for m in np.flatnonzero(need).tolist():
                    held[running[m]].extend(taken[at:at + int(need[m])])
                    at += int(need[m])
                self.nblocks[rows] += need
            return dict(zip(rows.tolist(), news.tolist())), budget - int(news.sum()), False
        return self._schedule_running_one_by_one(budget)

    def _schedule_running_one_by_one(self, budget: int) -> tuple[dict[int, int], int, bool]:
        """The loop vLLM runs: a request whose blocks the pool cannot give preempts the last running one (itself,
        when it is the last), and the step goes on with what fits."""
        scheduled: dict[int, int] = {}
        preempted = False
        k = 0
        step, bs, held = self.t.tokens_per_decode_step, self.cfg.block_size, self.blocks
        while k < len(self.running) and budget > 0:
            i = self.running[k]
            left = int(self.target[i] - self.computed[i])
            new = self._aligned(i, int(self.computed[i]), min(left, budget)) if left > 0 else 1
            if new == 0:  # a chunk shorter than a block keeps no state: this request waits for a later step
                k += 1
                continue
            tokens = self.computed[i] + new if left > 0 else self.prompt[i] + self.generated[i] + step
            if tokens <= len(held[i]) * bs:  # its blocks hold it already (what _grow would find)
                scheduled[i] = new
                budget -= new
                k += 1
                continue
            while not self._grow(i, tokens):
                preempted = True
                if self._preempt() == i:
                    break
            else:
                scheduled[i] = new
                budget -= new
                k += 1
                continue
            break  # request i itself was preempted: nothing after it runs either (it was the last)
        return scheduled, budget, preempted

    def _admit(self, i: int, budget: int) -> int:
        """Admit the waiting request i with at most ``budget`` new tokens: the tokens scheduled; 0 where this step's
        budget is short of its first chunk (a hybrid's whole block: the next step's may not be), -1 where the pool
        lacks the blocks (until a request finishes)."""
        cfg, pool = self.cfg, self.pool
        nodes = self._nodes(i)
        hits = pool.lookup(nodes[: int(self.cap[i])])
        if cfg.drop_hit_block and hits.size:  # MTP / EAGLE drafts: the hit's last block is computed again
            hits = hits[:-1]
        state = None
        if self.align and hits.size:
            hits, state = self._state_hit(nodes, hits)
        hit_tokens = hits.size * cfg.block_size
        computed, held = self._at_admission(i, hit_tokens, budget)
        if held <= computed < self.target[i]:  # its first chunk would be shorter than a block: not this step
            return 0
        need = self._blocks_for(held) - hits.size
        own = cfg.state_blocks_running - (self.states if self.align else 0)  # the boundary state is the hit's, or later
        idle = pool.idle(hits)
        state_idle = pool.idle(state) if state is not None else idle[:0]
        if need + own > pool.free - int(np.count_nonzero(idle)) - int(np.count_nonzero(state_idle)):
            return -1
        pool.touch(hits, idle)
        if state is not None:
            pool.touch(state, state_idle)
            self.boundary[i] = (hits.size, state)
        if own:
            self.state_run[i] = pool.allocate(own).tolist()
        self.blocks[i] = hits.tolist() + (pool.allocate(need).tolist() if need > 0 else [])
        self.nblocks[i] = len(self.blocks[i])
        self.cached_upto[i] = hits.size
        self.computed[i] = computed
        if computed > hit_tokens:  # blocks filled beyond the hit (a pull) are full and cached, as computed ones are
            self._hash_prompt(i)
        if not self.admitted_once[i]:
            self.admitted_once[i] = True
            self.run.hit_tokens[i] = hit_tokens
        self.running.append(i)
        self.run.events += 1
        return min(held - computed, budget)

    def _at_admission(self, i: int, hit_tokens: int, budget: int) -> tuple[int, int]:
        """(tokens of request i already computed when it is admitted, tokens its blocks must then hold): its prefix
        hit, and the hit with this step's chunk (simulate/disaggregated.py: a decode instance's pulled prompt)."""
        return hit_tokens, hit_tokens + self._aligned(i, hit_tokens, min(int(self.target[i]) - hit_tokens, budget))

    def _schedule_waiting(self, scheduled: dict[int, int], budget: int) -> None:
        self.blocked = False
        while self.waiting and budget > 0:
            if len(self.running) >= self.cfg.max_num_seqs:
                self.blocked = True
                return
            i = self.waiting[0]
            new = self._admit(i, budget)
            if new <= 0:  # blocked until a request finishes where the pool lacks room; where only this step's
                self.blocked = new < 0  # budget was short, the next step admits it (a decode-only jump would not)
                return
            self.waiting.popleft()
            scheduled[i] = new
            budget -= new

    # -- arrivals and finishes ------------------------------------------------------------------
    def _arrive(self, i: int, t: float) -> None:
        run = self.run
        run.arrival_s[i] = t  # sent then; TTFT counts from here
        run.events += 1
        nodes = self._nodes(i)
        probe = self.seen[nodes[: int(self.cap[i])]]
        unseen = np.flatnonzero(~probe)
        seen = int(unseen[0]) if unseen.size else int(probe.size)
        if self.cfg.drop_hit_block:  # what an unbounded cache would serve under the same rules: a block fewer,
            seen = max(seen - 1, 0)
        if self.align and seen:        # and a hybrid's up to the last block whose state was ever kept
            kept = np.flatnonzero(self.state_kept[nodes[:seen]])
            seen = int(kept[-1]) + 1 if kept.size else 0
        run.ideal_tokens[i] = seen * self.cfg.block_size
        self.seen[nodes] = True
        out = self.prompt[i] + self.out[i] if self.cfg.output_blocks else self.prompt[i] + 1
        if self._blocks_for(out) + self.cfg.state_blocks_running > self.cfg.num_blocks - 1:
            run.too_large += 1  # more blocks than the pool has: vLLM never schedules it
            if not self.rides[i]:
                self._next(int(self.user_of[i]), t)
            return
        self.waiting.append(i)

    def _next(self, user: int, t: float) -> None:
        k = self.next_of[user] + 1
        if k < len(self.order[user]):
            self._send(user, k, t + float(self.pauses[self.order[user][k]]))
        elif self.until_first_out:
            self.first_out = min(self.first_out, t)

    def _send(self, user: int, k: int, t: float) -> None:
        """The user's k-th request sent at ``t``, and the requests that ride with it (``riding``)."""
        reqs = self.order[user]
        heapq.heappush(self.arrivals, (t, reqs[k]))
        while k + 1 < len(reqs) and self.rides[reqs[k + 1]]:
            k += 1
            heapq.heappush(self.arrivals, (t, reqs[k]))
        self.next_of[user] = k

    def window_done(self) -> bool:
        """N users: the first of them has run out and every request sent before then is answered (the rest of the
        run is not measured: ``EngineRun.window_end_s``)."""
        if not math.isfinite(self.first_out) or (self.arrivals and self.arrivals[0][0] <= self.first_out):
            return False
        pending = [*self.running, *self.waiting]
        return not pending or bool(np.all(self.run.arrival_s[pending] > self.first_out))

    def _finish(self, i: int) -> None:
        self.run.finish_s[i] = self.now + self.fixed_s  # the last token as the client reads it
        self.run.events += 1
        self.running.remove(i)
        self._free(i)
        self._answered(i, self.run.finish_s[i])

    def _answered(self, i: int, t: float) -> None:
        """Request i's answer ended at ``t``: its user's next request follows (simulate/disaggregated.py: a
        prefill instance hands the request on instead). A request that rode with a turn gates nothing."""
        if not self.rides[i]:
            self._next(int(self.user_of[i]), t)

    # -- one step -------------------------------------------------------------------------------
    def _next_reach(self) -> float:
        """When the next request sent reaches the scheduler: the API server hands them over in the order sent, one
        ``handoff_s`` each (inf: none left to send)."""
        if not self.arrivals:
            return math.inf
        return max(self.arrivals[0][0], self.handed) + self.cfg.handoff_s

    def _take_arrivals(self) -> None:
        while (reach := self._next_reach()) <= self.now:
            t, i = heapq.heappop(self.arrivals)
            self.handed = reach
            self._arrive(i, t)

    def step(self) -> bool:
        """One scheduler step (or a jump of identical decode steps); False when nothing is left to do."""
        self._take_arrivals()
        if not self.running and not self.waiting:
            if not self.arrivals:
                return False
            self.now = max(self.now, self._next_reach())  # idle until the next request reaches the scheduler
            return True
        if self._can_jump():
            self._jump()
            return True
        budget = self.cfg.max_num_batched_tokens
        scheduled, budget, preempted = self._schedule_running(budget)
        if not preempted:
            self._schedule_waiting(scheduled, budget)
        self._execute(scheduled)
        return True

    def _execute(self, scheduled: dict[int, int]) -> None:
        run, t = self.run, self.t
        ids = np.fromiter(scheduled.keys(), dtype=np.int64, count=len(scheduled))
        news = np.fromiter(scheduled.values(), dtype=np.int64, count=len(scheduled))
        prefilling = self.computed[ids] < self.target[ids]
        pre, dec = ids[prefilling], ids[~prefilling]
        pre_new = news[prefilling].tolist()
        chunks = [(float(n), float(c)) for n, c in zip(pre_new, self.computed[pre].tolist())]
        run.prefill_chunks += len(chunks)
        contexts = self.prompt[dec] + self.generated[dec]
        dt = t.step_s(chunks, contexts.astype(np.float64) if dec.size else None)
        self.now += dt
        run.busy_s += dt
        run.steps += 1
        run.prefill_steps += bool(chunks)
        run.mixed_steps += bool(chunks) and bool(dec.size)
        if len(run.decoders_per_step) < _SAMPLE_STEPS:
            run.decoders_per_step.append(int(dec.size))
            run.step_seconds.append(dt)
        self.generated[dec] += t.tokens_per_decode_step
        for i, new in zip(pre.tolist(), pre_new):
            self.computed[i] += new
            self._hash_prompt(i)
            if self.computed[i] >= self.target[i]:  # the prefill's last chunk samples a token
                if math.isnan(run.first_token_s[i]):
                    run.first_token_s[i] = self.now + self.fixed_s  # as the client reads it
                self.generated[i] += 1
        done = (self.computed[ids] >= self.target[ids]) & (self.generated[ids] >= self.out[ids])
        for i in ids[done].tolist():  # in the order they were scheduled
            self._finish(i)

    # -- decode-only jumps ----------------------------------------------------------------------
    def _can_jump(self) -> bool:
        if not self.running or (self.waiting and not self.blocked):
            return False
        idx = np.asarray(self.running, dtype=np.int64)
        return len(self.running) <= self.cfg.max_num_batched_tokens and \
            bool(np.all(self.computed[idx] >= self.target[idx]))

    def _jump(self) -> None:
        """Advance k identical decode-only steps at once: k stops before the next arrival, finish or missing block."""
        run, t, bs = self.run, self.t, self.cfg.block_size
        idx = np.asarray(self.running, dtype=np.int64)
        s = t.tokens_per_decode_step
        gen = self.generated[idx]
        ctx = self.prompt[idx] + gen
        left = self.out[idx] - gen
        k_finish = max(1, int(np.min(np.ceil(left / s))))
        k = min(k_finish, JUMP_STEPS)
        # blocks: after j steps each needs ceil((ctx + (j + 1) s) / bs); stop where the pool runs short
        held = self.nblocks[idx]
        j = np.arange(k, dtype=np.float64)
        need = np.ceil((ctx[None, :] + (j[:, None] + 1) * s) / bs).astype(np.int64) - held[None, :]
        total = np.maximum(need, 0).sum(axis=1)
        short = np.flatnonzero(total > self.pool.free)
        if short.size:
            k = int(short[0])
            if k == 0:  # the very next step needs a block the pool lacks: the step-by-step path preempts
                budget = self.cfg.max_num_batched_tokens
                scheduled, _, _ = self._schedule_running(budget)
                self._execute(scheduled)
                return
        times = t.decode_s(ctx[None, :] + j[:k, None] * s)
        ends = self.now + np.cumsum(times)
        limit = min(self._next_reach(), self.horizon)
        if math.isfinite(limit):  # a step starting at or after the next arrival would see it: stop before
            starts = ends - times
            k = max(1, min(k, int(np.searchsorted(starts, limit, side="left"))))
        dt = float(ends[k - 1] - self.now)
        # the blocks the k steps need, taken from the pool in one call and handed out in the running order (what a
        # _grow per request would take: the free queue's front, one request after the other)
        extra = np.maximum(np.ceil((ctx + k * s) / bs).astype(np.int64) - held, 0)
        if extra.any():
            taken = self.pool.allocate(int(extra.sum())).tolist()
            at = 0
            for m in np.flatnonzero(extra).tolist():
                self.blocks[self.running[m]].extend(taken[at:at + int(extra[m])])
                at += int(extra[m])
            self.nblocks[idx] += extra
        self.generated[idx] += k * s
        self.now += dt
        run.busy_s += dt
        run.steps += k
        run.decode_only_steps += k
        run.jumps += 1
        room = _SAMPLE_STEPS - len(run.decoders_per_step)
        if room > 0:
            run.decoders_per_step.extend([idx.size] * min(k, room))
            run.step_seconds.extend(times[:min(k, room)].tolist())
        for i in idx[self.generated[idx] >= self.out[idx]].tolist():  # in the running order
            self._finish(i)


# ----------------------------------------------------------------------------------------------
# driving it: users from a replay, pauses from the trace or the workload
# ----------------------------------------------------------------------------------------------

def returning_turns(replay: Replay) -> np.ndarray:
    """Per request, whether it returns to its session: an earlier request of the same session was sent. Where no
    session has a second request (a trace without sessions, such as Mooncake's: each request its own), every
    request is judged a returning turn, its hits being other requests' shared prefixes."""
    session = np.asarray(replay.session)
    _, first = np.unique(session, return_index=True)
    if first.size == session.size:
        return np.ones(session.size, dtype=bool)
    returning = np.ones(session.size, dtype=bool)
    returning[first] = False
    return returning


def _next_in_session(replay: Replay) -> np.ndarray:
    """Per request, its session's next request (-1: the last), in the replay's order."""
    nxt = np.full(replay.requests, -1, dtype=np.int64)
    last: dict[int, int] = {}
    for i, s in enumerate(replay.session.tolist()):
        if s in last:
            nxt[last[s]] = i
        last[s] = i
    return nxt


def closed_loop_users(replay: Replay) -> np.ndarray:
    """Whose request each is: the replay's user (``--users N``), else its session (the trace as it is)."""
    return np.where(replay.user >= 0, replay.user, replay.session)


def riding(replay: Replay) -> np.ndarray:
    """Per request, whether it is sent with its user's turn rather than after that turn's answer: a subagent
    request of sessions generated from a workload (DESIGN.md's cycle: "send a turn (the new tail, plus any subagent
    requests)"; simulate/synthetic.py sends them at the turn's moment). A trace's subagents keep its own order (a
    Claude Code subagent runs while its parent waits on it)."""
    if replay.choices.get("format") != REPLIES_REUSED:
        return np.zeros(replay.requests, dtype=bool)
    return np.asarray(replay.subagent, dtype=bool)


def closed_loop(replay: Replay) -> tuple[np.ndarray, dict[int, float], dict[int, list[int]]]:
    """Per request, the pause before it (its arrival less its predecessor's arrival and service, in the replay's
    user order); each user's first arrival; each user's requests in order, a request that rides (``riding``) in
    the order right after the turn it is sent with."""
    n = replay.requests
    users_of = closed_loop_users(replay)
    rides = riding(replay)
    order: dict[int, list[int]] = {}
    for i in np.lexsort((rides, replay.arrival_s, users_of)).tolist():
        order.setdefault(int(users_of[i]), []).append(i)
    pauses = np.zeros(n, dtype=np.float64)
    service = np.nan_to_num(replay.service_s, nan=0.0)
    starts = {}
    for u, reqs in order.items():
        starts[u] = float(replay.arrival_s[reqs[0]])
        a = np.asarray(reqs)
        if a.size > 1:
            pauses[a[1:]] = np.maximum(replay.arrival_s[a[1:]] - replay.arrival_s[a[:-1]] - service[a[:-1]], 0.0)
    return pauses, starts, order


class RunTooLarge(BadInput):
    """A replay with more requests than one engine run prices (``MAX_ENGINE_REQUESTS``), refused before the loop."""


def simulate_engine(replay: Replay, cfg: EngineConfig, times, *, warmup: float = DEFAULT_WARMUP,
                    max_steps: int = MAX_ENGINE_STEPS) -> EngineRun:
    """Run the engine over every request of ``replay`` (closed-loop by user) and return what it measured."""
    if not 0 <= warmup < 1:
        raise BadInput(f"the warm-up must be in [0, 1), got {warmup!r}")
    if replay.requests > MAX_ENGINE_REQUESTS:
        raise RunTooLarge(f"{replay.requests:,} requests in one engine run, past the simulator's "
                          f"{MAX_ENGINE_REQUESTS:,} (each is priced step by step, about a millisecond of CPU): "
                          "replay fewer (a trace's first lines, fewer --sessions or --sessions-per-user), or drop "
                          "--engine for the cache replay")
    pauses, starts, order = closed_loop(replay)
    eng = _Engine(replay, cfg, times, pauses, starts, order, warmup)
    while eng.step():
        if eng.run.steps >= max_steps:
            eng.run.stopped = True
            break
        if eng.window_done():
            break
    eng.run.clock_s = eng.now
    eng.run.window_end_s = eng.first_out
    if eng.until_first_out:
        eng.run.sessions_per_user, eng.run.drawn_requests = replay.choices.get("sessions_per_user"), replay.requests
    return eng.run


# ----------------------------------------------------------------------------------------------
# the comfort SLO and users at which it breaks
# ----------------------------------------------------------------------------------------------

# BASELINE_SLACK (planning.interference): the share of misses load may add to what one user alone already has
# (sampling noise), the plan's allowance too


@frozen
class Comfort(Record):
    """DESIGN.md's "served comfortably", as the engine sees it: at most 5% of turns (the p95) miss the TTFT
    budget, at most 5% of requests decode below the floor, and at least 95% of returning turns are warm.

    Where one user alone already misses more (a cold prefill longer than the budget, a prompt prefilled beside
    a decode), the criterion is that load adds no more than ``BASELINE_SLACK`` to the share one user alone
    misses: a budget one miss exceeds is a share of turns that miss it, never zero users (DESIGN.md)."""

    ttft_limit_s: float = 10.0
    decode_floor_tok_s: float = 40.0
    ttft_percentile: float = DEFAULT_TTFT_PERCENTILE
    decode_percentile: float = DEFAULT_DECODE_PERCENTILE
    warm_share: float = DEFAULT_WARM_SHARE

    JSON_EXTRA = ("baseline_slack",)

    @property
    def baseline_slack(self) -> float:
        """BASELINE_SLACK: what load may add to the share one user alone misses."""
        return BASELINE_SLACK

    def shares(self, run: EngineRun) -> dict:
        ttft, speed = run.ttft_s, run.decode_tok_s
        return {"ttft_miss": float(np.mean(ttft > self.ttft_limit_s)) if ttft.size else 1.0,
                "slow": float(np.mean(speed < self.decode_floor_tok_s)) if speed.size else 0.0,
                "warm": run.warm_share}

    def check(self, run: EngineRun, baseline: dict | None = None) -> tuple[bool, str]:
        """(met, why), ``baseline`` the ``shares`` of one user alone (None: the run is that one)."""
        if not run.ttft_s.size:
            return False, "no request was answered after the warm-up"
        if run.stopped:
            return False, f"the run stopped at {MAX_ENGINE_STEPS:,} steps"
        got = self.shares(run)
        base = baseline or got
        slack = BASELINE_SLACK if baseline is not None else 0.0
        allowed = allowed_slow_share(self.ttft_percentile, base["ttft_miss"], slack)
        if got["ttft_miss"] > allowed + 1e-12:
            share, limit = apart(got["ttft_miss"], allowed)
            return False, (f"{share} of turns wait > {self.ttft_limit_s:g} s for the first token "
                           f"(allowed {limit}; one user alone {base['ttft_miss']:.1%})")
        allowed = allowed_slow_share(self.decode_percentile, base["slow"], slack)
        if got["slow"] > allowed + 1e-12:
            mixed = run.mixed_steps / max(run.prefill_steps, 1)
            share, limit = apart(got["slow"], allowed)
            return False, (f"{share} of requests decode < {self.decode_floor_tok_s:g} tok/s "
                           f"(allowed {limit}; one user alone {base['slow']:.1%}): {mixed:.0%} of the steps "
                           "that prefill also carry decodes, which wait for the chunk")
        if got["warm"] is None:  # no turn with a prefix to keep was measured: warmth is not what decides
            return True, "met"
        need = self.warm_share if base["warm"] is None else \
            min(self.warm_share, base["warm"] - BASELINE_SLACK * (baseline is not None))
        if got["warm"] < need - 1e-12:
            alone = "-" if base["warm"] is None else f"{base['warm']:.1%}"
            share, limit = apart(got["warm"], need)
            return False, f"warm turns {share} < {limit} (one user alone {alone})"
        return True, "met"


def apart(share: float, limit: float) -> tuple[str, str]:
    """A share and the limit it broke, as percentages with as many decimals (1 to 3) as it takes for the two to
    read apart: a run that breaks 5.0% by 0.04 points reads "5.04% (allowed 5.00%)", not "5.0% (allowed 5.0%)"."""
    for places in (1, 2, 3):
        a, b = f"{share:.{places}%}", f"{limit:.{places}%}"
        if a != b:
            break
    return a, b


@dataclass
class EngineUsers:
    """The largest N whose engine run meets the comfort SLO (0: not even one user), and every N tried."""

    users: int
    comfort: Comfort
    points: dict[int, dict]
    capped: bool = False
    breaks_at: int | None = None
    reason: str = ""

    def to_dict(self) -> dict:
        return {"users": self.users, "capped": self.capped, "breaks_at": self.breaks_at, "reason": self.reason,
                "comfort": self.comfort.to_dict(), "points": [self.points[n] for n in sorted(self.points)]}

    def line(self) -> str:
        above = "at least " if self.capped else ""
        why = f"; at {self.breaks_at:,}: {self.reason}" if self.breaks_at else \
            (f"; the search stopped there: {self.reason}" if self.reason else "")
        return f"{above}{self.users:,} users served comfortably (engine simulator){why}"


def users_at_comfort(run_at: Callable[[int], EngineRun], comfort: Comfort, *, max_users: int = MAX_ENGINE_USERS,
                     progress: Progress | None = None) -> EngineUsers:
    """Doubling then bisection over N (each N one engine run) for the largest N meeting ``comfort``. A run too
    large to price (``RunTooLarge``: more requests than one run takes) stops the search there, the users found a
    lower bound ("at least"); at one user it is the caller's refusal."""
    if not 1 <= max_users <= MAX_ENGINE_USERS:
        raise BadInput(f"the users searched must be in [1, {MAX_ENGINE_USERS:,}], got {max_users!r}")
    points: dict[int, dict] = {}
    verdict: dict[int, tuple[bool, str]] = {}
    baseline: dict = {}

    def ok(n: int) -> bool:
        if n not in verdict:
            if progress is not None:
                progress(f"engine simulator: {n:,} users")
            run = run_at(n)
            if n == 1:
                baseline.update(comfort.shares(run))
            verdict[n] = comfort.check(run, None if n == 1 else baseline)
            points[n] = {**run.summary(), **comfort.shares(run), "comfortable": verdict[n][0], "why": verdict[n][1]}
        return verdict[n][0]

    if not ok(1):
        return EngineUsers(0, comfort, points, breaks_at=1, reason=verdict[1][1])
    good, bad = 1, None
    try:
        while bad is None:
            n = min(2 * good, max_users)
            if n == good:
                return EngineUsers(good, comfort, points, capped=True)
            good, bad = (n, None) if ok(n) else (good, n)
        while bad - good > 1:
            mid = (good + bad) // 2
            good, bad = (mid, bad) if ok(mid) else (good, mid)
    except RunTooLarge as exc:
        return EngineUsers(good, comfort, points, capped=True, reason=f"the next run tried: {exc}")
    return EngineUsers(good, comfort, points, breaks_at=bad, reason=verdict[bad][1])


def judged_rate(arrival_s: np.ndarray, warmup: float) -> float:
    """The arrival rate (per second of the trace's clock) of the requests a run of this trace judges: those sent
    after the warm-up's share of its clock (``EngineRun.measured``), over that part of the clock. The trace is
    scaled by this rate, not by its whole span's, so that "N users" names the load the comfort SLO is judged at: a
    trace's rate is not flat over its clock (Mooncake's conversation trace sends 6.8% more than its mean in its
    second half, its synthetic trace 3.6%), and scaled by its whole span its judged half ran that much above the N
    users the plan prices. The clock starts at 0 (the replay's ``align="trace"``); the drain after the last
    arrival, which the run's window also spans, is left out (seconds against the trace's hour)."""
    t = np.asarray(arrival_s, dtype=float)
    if t.size < 2 or not 0 <= warmup < 1:
        raise BadInput(f"a rate needs two arrivals and a warm-up in [0, 1), got {t.size} and {warmup!r}")
    start, end = warmup * float(t[-1]), float(t[-1])
    if not end > start:
        raise BadInput("every request arrives at once: no rate to scale")
    # counted as EngineRun.sent_per_s counts the window (at least the last arrival is in it)
    return int(np.count_nonzero(t >= start)) / (end - start)


def spread_ties(arrival_s: np.ndarray, seed: int = 0) -> np.ndarray:
    """Arrival times (sorted) with each group of equal times placed uniformly at random (seeded, in order) over the
    interval to the next distinct time (the last group over the median interval between distinct times).

    A timestamp is a reading at the trace's resolution: requests logged at one instant arrived somewhere within
    it. Mooncake's conversation trace logs its 12,031 requests at 1,180 distinct times, 3 s apart or more; replayed
    as written, open loop, every stretch of its clock still sends about ten requests at the same instant, so even
    one user's rate came as bursts whose prefills stalled each other's decodes (24.8% of replies under 40 tok/s
    on Qwen 3.6 27B with no other load). Placed evenly instead, the arrivals are as regular as a clock, and a
    request's first decode step almost never meets the next one's prefill (9% of the shortest replies slowed at a
    prefill load of 0.28, where a Poisson stream slows 28%). Uniform positions given the count are what a Poisson process
    of the trace's rate would give (the plan's arrivals); the requests keep their order, the trace's distinct
    times and its rate."""
    t = np.asarray(arrival_s, dtype=float)
    if t.size >= 2 and np.any(np.diff(t) < 0):
        raise BadInput("arrival times must be sorted to spread their ties")
    if t.size < 2:
        return t.copy()
    distinct, counts = np.unique(t, return_counts=True)
    if distinct.size == t.size:
        return t.copy()
    gaps = np.diff(distinct)
    span = np.append(gaps, median(gaps) if gaps.size else 0.0)
    offsets = np.random.default_rng(seed).random(t.size)
    group = np.repeat(np.arange(distinct.size), counts)
    offsets = offsets[np.lexsort((offsets, group))]  # sorted within each group: the requests keep their order
    return t + np.where(np.repeat(counts, counts) > 1, offsets * np.repeat(span, counts), 0.0)


def measured_enough(run_with: Callable[[int | None], EngineRun], users: int, *, fixed: bool = False) -> EngineRun:
    """N closed-loop users' run, measuring at least MIN_MEASURED_REQUESTS: ``run_with(None)`` draws the replay's
    default sessions per user; a run that measures fewer draws more (in proportion, a quarter over) and runs again,
    MEASURE_PASSES runs at most, aiming under MAX_ENGINE_REQUESTS' worth of drawn requests (a draw that still comes
    out past it leaves the run before). ``fixed``: the user chose the sessions per user (--sessions-per-user), and
    one run is what they asked for."""
    run = run_with(None)
    for _ in range(MEASURE_PASSES - 1):
        got, per_user = int(run.measured().sum()), run.sessions_per_user
        if fixed or got >= MIN_MEASURED_REQUESTS or per_user is None or run.stopped:
            break
        room = per_user * MAX_ENGINE_REQUESTS // max(run.drawn_requests, 1)  # the most sessions a run may draw
        more = min(math.ceil(per_user * 1.25 * MIN_MEASURED_REQUESTS / max(got, 1)), room, MAX_REPLAY_SESSIONS // users)
        if more <= per_user:
            break
        try:
            run = run_with(more)
        except RunTooLarge:  # the larger draw came out past what one run takes: the run already made stands
            break
    return run


def engine_users(trace: Trace, opts: ReplayOptions, cfg: EngineConfig, times, comfort: Comfort, *,
                 users: int | None = None, warmup: float = DEFAULT_WARMUP, max_users: int = MAX_ENGINE_USERS,
                 think_time_s: float | None = None, progress: Progress | None = None
                 ) -> tuple[EngineRun | None, EngineUsers | None]:
    """At ``users`` (one run), or the users at which ``comfort`` breaks (the search).

    A trace of sessions: N users each running sessions back to back (replay.py's ``--users``), closed-loop. A
    trace of lone requests on one clock (Mooncake): its arrivals compressed or stretched so that they come at the
    rate N users make, N / (think time + their mean response) (planning.latency.request_rate;
    ``think_time_s`` the workload's, the response measured by the run before at the rate before), each request
    on its own (open-loop)."""
    if trace.has_sessions:  # closed loop: every drawn session kept, the run measured until the first user runs out
        base = replace(opts, users=None, warmup=0.0, block_size=cfg.block_size, cut=False,
                       align=opts.align if opts.align in ("t0", "stagger") else "stagger")

        def run_at(n: int) -> EngineRun:
            return measured_enough(lambda per_user: simulate_engine(
                build_replay(trace, replace(base, users=n, sessions_per_user=per_user or opts.sessions_per_user)), cfg,
                times, warmup=warmup),
                n, fixed=opts.sessions_per_user is not None)
    else:
        if think_time_s is None or not think_time_s > 0:
            raise BadInput(f"{trace.name}: its requests belong to no sessions; the engine simulator needs the "
                           "workload's think time to turn its arrival rate into users")
        replay = build_replay(trace, replace(opts, users=None, warmup=0.0, block_size=cfg.block_size, align="trace"))
        span = float(replay.arrival_s.max() - replay.arrival_s.min()) if replay.requests > 1 else 0.0
        if not span > 0:
            raise BadInput(f"{trace.name}: every request arrives at once: no rate to scale")
        replay = replace(replay, arrival_s=spread_ties(replay.arrival_s, opts.seed))
        trace_rate = judged_rate(replay.arrival_s, warmup)

        def run_at(n: int) -> EngineRun:
            from servesize.planning.latency import request_rate

            # N users send one turn a cycle, think + their mean response; the response is the run's own, so the
            # rate is corrected from the run before (RATE_PASSES runs at most, from the rate with no response)
            rate = request_rate(n, think_time_s)
            for _ in range(RATE_PASSES):
                scale = trace_rate / rate  # > 1 stretches the trace's clock
                out = simulate_engine(replace(replay, arrival_s=replay.arrival_s * scale), cfg, times, warmup=warmup)
                out.users, out.sent_rate_per_s = n, rate
                response = out.mean_response_s()  # None: none finished, and the comfort check fails the run
                nxt = rate if response is None else request_rate(n, think_time_s, response_s=response)
                out.rate_settled = abs(nxt / rate - 1.0) <= RATE_TOLERANCE
                if out.rate_settled:
                    break
                rate = nxt
            return out

    at = run_at(users) if users is not None else None
    found = users_at_comfort(run_at, comfort, max_users=max_users, progress=progress) if users is None else None
    return at, found


# ----------------------------------------------------------------------------------------------
# beside the plan: agreement, or the reason they differ
# ----------------------------------------------------------------------------------------------

AGREEMENT = 0.15  # plan's users and the engine's users-at-SLO agree when within this share of the engine's

_WHY = {  # what each side's limit models, for the one-line reason
    "cache": ("plan's cache ceiling counts sessions whose whole context fits at once (p5 of the warm fill), and no "
              "more than the pool keeps through a pause (LRU churn)"),
    "decode": ("plan's decode ceiling prices the decoders it expects at once against the floor, and the prefill "
               "chunks that share their steps (planning.interference)"),
    "latency": "plan's latency ceiling is a queue of cold and warm prefills against the TTFT budget",
    "saturation": "plan's saturation ceiling is the prefill work per replica at 100% duty",
    # a disaggregated layout's own (planning/disaggregated.py)
    "prefill cache": ("plan's prefill-cache ceiling counts the sessions whose whole context the prefill instances' "
                      "pools hold at once (p5 of the warm fill), as the cache ceiling does for the decode pool"),
    "link": "plan's link ceiling is the users whose pulls keep the decode ranks' or the prefill GPUs' links busy",
}


def disagreement(plan_users: float, plan_binding: str, engine: EngineUsers, dp: int = 1,
                 tolerance: float = AGREEMENT) -> str | None:
    """One line, or None when plan's users are within ``tolerance`` of the engine's users-at-SLO (x dp)."""
    sim = engine.users * dp
    if sim > 0 and abs(plan_users - sim) <= tolerance * sim:
        return None
    if sim == 0 and plan_users < 1:
        return None
    gap = f"{(plan_users - sim) / sim:+.0%}" if sim else "the engine serves none"
    broke = f"at {engine.breaks_at * dp:,} the engine breaks on {engine.reason}" if engine.breaks_at else \
        (f"the engine's search stopped at {engine.users * dp:,}, a lower bound: {engine.reason}" if engine.reason
         else f"the engine met the SLO up to its search cap ({engine.users * dp:,})")
    return (f"plan {plan_users:,.0f} users ({plan_binding} binds) vs the engine simulator's {sim:,} ({gap}): "
            f"{_WHY.get(plan_binding, plan_binding)}; {broke}")


@dataclass
class EngineReport:
    """``simulate --engine``: the deployment's engine at N users and/or the users at which comfort breaks."""

    trace: dict
    config: EngineConfig
    step_model: str
    comfort: Comfort
    mixed_step: str
    choices: dict
    at: EngineRun | None = None
    found: EngineUsers | None = None
    plan: dict | None = None
    disagreement: str | None = None
    workload: dict | None = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    exit_code: int = 0
    plan_object: Any = field(default=None, repr=False)  # the Plan itself (check_plan sets its disagreement)

    def to_dict(self) -> dict:
        c = self.config
        return {"trace": self.trace, "engine": {"num_blocks": c.num_blocks, "block_size": c.block_size,
                                                "pool_tokens": (c.num_blocks - 1) * c.block_size,
                                                "max_num_seqs": c.max_num_seqs,
                                                "max_num_batched_tokens": c.max_num_batched_tokens,
                                                "step_model": self.step_model, "mixed_step": self.mixed_step},
                "comfort": self.comfort.to_dict(), "choices": self.choices,
                "at_users": None if self.at is None else self.at.summary(),
                "users_at_slo": None if self.found is None else self.found.to_dict(),
                "plan": self.plan, "disagreement": self.disagreement, "fitted_workload": self.workload,
                "notes": self.notes, "seconds": self.seconds}

    def render(self, explain: bool = False) -> str:
        c = self.config
        lines = []
        if self.disagreement:
            lines.append(f"plan differs from the engine simulator: {self.disagreement}")
        lines += [f"engine simulator (vLLM V1 scheduler): {self.trace.get('name', '?')}",
                  f"  pool {c.num_blocks:,} blocks x {c.block_size} tokens, --max-num-seqs {c.max_num_seqs}, "
                  f"--max-num-batched-tokens {c.max_num_batched_tokens:,}; steps: {self.step_model}",
                  f"  comfort: TTFT p{self.comfort.ttft_percentile:g} <= {self.comfort.ttft_limit_s:g} s, decode "
                  f"p{100 - self.comfort.decode_percentile:g} >= {self.comfort.decode_floor_tok_s:g} tok/s, warm turns "
                  f">= {self.comfort.warm_share:.0%}"]
        rows = []
        if self.at is not None:
            rows.append(self.at.summary())
        if self.found is not None:
            rows += [self.found.points[n] for n in sorted(self.found.points)]
        if rows:
            lines.append(f"  {'users':>6} {'TTFT p50':>9} {'p95':>8} {'decode p50':>11} {'p5':>7} {'warm':>6} "
                         f"{'preempt':>8} {'steps':>10}  verdict")
        for r in rows:
            lines.append(f"  {r['users']:>6,} {_s(r['ttft_s_p50']):>9} {_s(r['ttft_s_p95']):>8} "
                         f"{_v(r['decode_tok_s_p50']):>11} {_v(r['decode_tok_s_p5']):>7} {_share(r['warm_share']):>6} "
                         f"{r['preemptions']:>8,} {r['steps']:>10,}  {r.get('why', '')}")
        if self.found is not None:
            lines.append(self.found.line())
        if self.plan is not None:
            lines.append(f"plan for the same workload and pool: {self.plan['users']:,.0f} users "
                         f"({self.plan['binding']} binds; ceilings " + ", ".join(
                             f"{k} {v:,.0f}" for k, v in self.plan["ceilings"].items()) + ")")
        lines += [f"note: {n}" for n in self.notes]
        lines.append(f"({self.seconds:.1f} s)")
        return "\n".join(lines)


def open_loop_note(found: EngineUsers | None, at: EngineRun | None, think_time_s: float) -> list[str]:
    """A trace of lone requests: the rate its users were sent at, at the users reported (none for a trace of
    sessions, whose runs are not scaled to a rate)."""
    row = (found.points.get(found.users) if found is not None else None) or (at.summary() if at is not None else None)
    if row is None or row["scaled_to_per_s"] is None:
        return []
    response = row["mean_response_s"]
    return [f"its requests belong to no sessions: they are sent open-loop at the rate N users make, N / (think time "
            f"{think_time_s:g} s + their mean response); at {row['users']:,} users {row['scaled_to_per_s']:.3g} "
            "requests/s (" + ("no request finished" if response is None else f"mean response {response:.2f} s")
            + (f"; the rate still moved by over {RATE_TOLERANCE:.0%} after {RATE_PASSES} runs"
               if row["rate_settled"] is False else "") + ")"]


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f} s"


def _v(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _share(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"
