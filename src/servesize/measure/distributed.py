"""``measure sessions --workers N``: a rung's simulated users spread over worker processes with Ray.

Ray is the engine because the measurement client is asyncio: a Ray async actor runs the same client and the
same user loop (``servesize.measure.sessions.run_users``) in its own process and event loop, returns its
outcome records as plain values, and a death of its process is an exception the coordinator awaits, not a
silence it has to time out. The engine distributes users and collects records; it does not time anything.
``ray start --head`` on one host and ``ray start --address HEAD:6379`` on the others make a cluster that
``--ray-address`` attaches to (docs/measure.md, "Across machines").

- **Sticky partition.** User u of a rung runs on worker u mod N, in every rung: all of a user's sessions go
  through one process (and its connections), as the plan's DP recipe assumes of a router. A user's requests
  come from its own seeded generator (seed, rung, user), so which worker runs it does not change what it sends.
- **One record.** The coordinator appends every worker's requests to its one record (each ``request`` event
  names its ``worker``), sorted by completion on the coordinator's clock, and a ``workers`` event per rung
  with each worker's clock offsets, its users and its request count. Nothing else changes: the rung's
  statistics, the knee and the verdict are computed by the same code from the same kind of records.
- **Clocks reconciled.** Before each rung the coordinator asks each worker for its clocks ``CLOCK_SAMPLES``
  times and keeps the round trip that was shortest (NTP's choice): offset = worker clock - the midpoint of the
  coordinator's send and receive, uncertain by half that round trip. The worker's ``wall_time`` (time.time)
  and ``t_sent_ns`` (perf_counter) of each request are shifted by those offsets into the coordinator's clocks;
  every ``*_s`` of a request is a difference of one worker's clock and needs no shift.
- **A dead worker fails the rung.** A worker's requests come back when its share of the rung ends; a worker
  that dies mid-rung takes the requests of its users with it, so the rung is FAILED (``rung_failed``, its
  reason naming the worker), never judged from the other workers' partial data, the ladder ends (exit 2), and
  ``--resume`` measures that rung again, with any number of workers.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import ray

from servesize import __version__
from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.measure.client import RequestResult, StreamClient

CLOCK_SAMPLES = 5  # clock round trips per worker before each rung; the shortest decides the offset
# how long the workers may take to start and open their clients: a local start takes a few seconds (about 1 s
# per actor on a loaded 2-core machine); a cluster short of CPUs would otherwise leave them pending for ever
START_TIMEOUT_S = 120.0
TAKE_TIMEOUT_S = 10.0  # an interrupted run waits this long per worker for the requests it completed
# A worker's share of a rung ends by the rung's duration plus one request's --timeout (its last request may start
# just before the end); past that and SHARE_GRACE_S more (Ray's scheduling and the records' transfer) a worker that
# has not answered is taken as partitioned or hung: the rung is FAILED and the worker killed, never waited on for
# ever (a stopped process, or a host cut off before Ray's health checks call it dead, is a silence, not an error)
SHARE_GRACE_S = 60.0
CLOCK_TIMEOUT_S = 30.0  # one clock round trip: a worker that cannot answer it in this long takes no share


@frozen
class WorkerFault:
    """A worker that exits (``os._exit``, as a crash or the OOM killer ends a process) once it has completed
    ``after`` requests of rung ``rung`` (0-based index): the tests' way of killing one worker mid-rung."""

    worker: int
    rung: int
    after: int
    kind: str = "exit"  # 'exit': os._exit (a crash); 'hang': its share never returns (a partitioned host's silence)


def partition(users: int, n: int) -> list[list[int]]:
    """The users of a rung each of ``n`` workers runs: user u on worker u mod n (sticky across rungs)."""
    return [list(range(k, users, n)) for k in range(n)]


@dataclass
class RungOutcome:
    results: list[tuple[int, RequestResult]]  # (worker, request) on the coordinator's clocks, by completion
    workers: list[dict]  # per worker: its users, clock offsets, requests, and why it gave none, if it died
    lost: str | None  # why the rung is not a measurement (a worker died), or None


class _Worker:
    """The Ray actor: a StreamClient per endpoint, the rung's user loop on its share of users."""

    def __init__(self, number: int, fault: WorkerFault | None = None):
        self.number, self.fault = number, fault
        self.clients: list[StreamClient] = []  # one per endpoint of the run's --url
        self.cfg: Any = None
        self.taken: list[RequestResult] = []
        self.silent = False
        gc.disable()  # as run_async does on the coordinator: collections run between rungs

    async def open(self, params: dict, model: str) -> dict:
        from servesize.measure.sessions import SessionsConfig, endpoints

        self.cfg = SessionsConfig.from_params(params)
        for url in endpoints(self.cfg.url):
            client = StreamClient(url, model, timeout_s=self.cfg.timeout_s, stall_timeout_s=self.cfg.stall_timeout_s)
            await client.__aenter__()
            self.clients.append(client)
        return {"host": socket.gethostname(), "pid": os.getpid(), "version": __version__}

    async def clock(self) -> tuple[int, int]:
        return time.time_ns(), time.perf_counter_ns()

    async def run_share(self, index: int, users: int, share: list[int], rung_nonce: int, tokens_per_word: float) -> list[dict]:
        from servesize.measure.sessions import run_users

        fault = self.fault
        die = fault is not None and fault.worker == self.number and fault.rung == index

        def on_result(r: RequestResult, results: list[RequestResult], left_s: float) -> None:
            self.taken = results  # what take() hands over if the coordinator is interrupted mid-rung
            if die and fault is not None and len(results) >= fault.after:
                if fault.kind != "hang":
                    os._exit(70)
                self.silent = True

        results = await run_users(self.clients, self.cfg, index=index, users=users, share=share, rung_nonce=rung_nonce,
                                  tokens_per_word=tokens_per_word, on_result=on_result)
        if self.silent:  # the tests' silent worker: alive (Ray's health checks pass), its share never answered
            await asyncio.Event().wait()
        out = [r.to_dict() for r in results]
        gc.collect()
        return out

    async def take(self) -> list[dict]:
        """The requests of the share in progress completed so far (the coordinator was interrupted mid-rung)."""
        return [r.to_dict() for r in list(self.taken)]

    async def close(self) -> None:
        for client in self.clients:
            await client.__aexit__(None, None, None)
        self.clients = []


SessionsWorker = ray.remote(num_cpus=1)(_Worker)


class ShareOverdue(Exception):
    """A worker that did not answer its share of a rung in time (SHARE_GRACE_S)."""


async def wait_for_shares(tasks: dict[int, asyncio.Future], deadline_s: float) -> None:
    """The real clock: return once every worker's share has answered, or ``deadline_s`` seconds have passed.
    ``RayWorkers(wait_shares=...)`` takes another (the tests' clock jumps to the deadline instead of sleeping)."""
    await asyncio.wait(tasks.values(), timeout=deadline_s)


SharesWait = Callable[[dict[int, asyncio.Future], float], Awaitable[None]]


class RayWorkers:
    """N Ray actors for one ``measure sessions`` run: on a local Ray started here (and stopped at ``close``), on
    the Ray cluster at ``address``, or on the Ray this process has already initialised."""

    def __init__(self, n: int, *, address: str | None = None, fault: WorkerFault | None = None,
                 share_grace_s: float = SHARE_GRACE_S, wait_shares: SharesWait = wait_for_shares):
        if n < 1:  # the flag's range is declared with the measure flags (servesize.commands._measure.FLAGS)
            raise BadInput(f"--workers {n}: at least one worker")
        self.n, self.address, self.fault = n, address, fault
        self.share_grace_s = share_grace_s
        self.wait_shares = wait_shares  # how a rung's deadline is waited on (wait_for_shares: the real clock)
        self.actors: list[Any] = []
        self.joined: list[dict] = []
        self.interrupted: list[tuple[int, RequestResult]] = []  # an interrupted rung's completed requests
        self._owned = False

    def describe(self) -> str:
        return f"Ray cluster at {self.address}" if self.address else "Ray on this machine"

    def _init(self) -> None:
        if ray.is_initialized():
            return
        quiet: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.ERROR}
        handlers = _signal_handlers()
        try:
            if self.address:
                ray.init(address=self.address, **quiet)
            else:
                ray.init(num_cpus=max(self.n, os.cpu_count() or 1), **quiet)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise BadInput(f"cannot start Ray for --workers ({self.describe()}): {str(exc).splitlines()[0]}") from None
        finally:
            _restore(handlers)
        self._owned = True

    async def start(self, cfg: Any, model: str) -> list[dict]:
        """Start the actors and open each one's client; what each reports (host, pid, servesize version)."""
        self._init()
        spread = {"scheduling_strategy": "SPREAD"} if self.address else {}
        self.actors = [SessionsWorker.options(**spread).remote(k, self.fault) for k in range(self.n)]
        params = cfg.to_params()
        try:
            infos = await asyncio.wait_for(asyncio.gather(*(a.open.remote(params, model) for a in self.actors)), START_TIMEOUT_S)
        except TimeoutError:
            cpus = ray.cluster_resources().get("CPU", 0)
            raise BadInput(f"{self.describe()} did not start {self.n} workers within {START_TIMEOUT_S:g} s (each takes 1 CPU; "
                           f"the cluster has {cpus:g}): attach more hosts or ask for fewer --workers") from None
        self.joined = [{"worker": k, **info} for k, info in enumerate(infos)]
        other = [j for j in self.joined if j["version"] != __version__]
        if other:
            raise BadInput(f"worker {other[0]['worker']} on {other[0]['host']} runs servesize {other[0]['version']}, the "
                           f"coordinator {__version__}: install the same version on every host")
        return self.joined

    async def _clock(self, k: int) -> dict:
        """Worker k's clock offsets from the coordinator's, from the shortest of CLOCK_SAMPLES round trips."""
        best: tuple[int, int, int] | None = None  # (round trip ns, wall offset ns, monotonic offset ns)
        for _ in range(CLOCK_SAMPLES):
            w0, m0 = time.time_ns(), time.perf_counter_ns()
            wall, mono = await asyncio.wait_for(self.actors[k].clock.remote(), CLOCK_TIMEOUT_S)
            w1, m1 = time.time_ns(), time.perf_counter_ns()
            sample = (m1 - m0, wall - (w0 + w1) // 2, mono - (m0 + m1) // 2)
            if best is None or sample[0] < best[0]:
                best = sample
        assert best is not None
        return {"rtt_s": best[0] / 1e9, "wall_offset_s": best[1] / 1e9, "mono_offset_ns": best[2],
                "uncertainty_s": best[0] / 2e9}

    async def run_rung(self, cfg: Any, *, index: int, users: int, rung_nonce: int, tokens_per_word: float) -> RungOutcome:
        shares = partition(users, self.n)
        busy = [k for k in range(self.n) if shares[k]]
        clocks = await asyncio.gather(*(self._clock(k) for k in busy), return_exceptions=True)
        clock = dict(zip(busy, clocks))
        calls = {k: self.actors[k].run_share.remote(index, users, shares[k], rung_nonce, tokens_per_word)
                 for k in busy if not isinstance(clock[k], BaseException)}
        try:
            got = await self._shares(calls, cfg.duration_s + cfg.timeout_s + self.share_grace_s)
        except asyncio.CancelledError:  # Ctrl-C or SIGTERM on the coordinator: keep what the workers completed
            self.interrupted = await self._take(calls, clock)
            raise
        merged: list[tuple[int, RequestResult]] = []
        workers: list[dict] = []
        lost = None
        for k in busy:
            entry: dict[str, Any] = {"worker": k, "host": self.joined[k]["host"], "pid": self.joined[k]["pid"], "users": shares[k]}
            outcome = clock[k] if isinstance(clock[k], BaseException) else got[k]
            if isinstance(outcome, BaseException):
                text = str(outcome).strip()
                why = f"{type(outcome).__name__}: {text.splitlines()[0] if text else ''}"
                entry.update(requests=0, died=why)
                how = ("died" if isinstance(outcome, ray.exceptions.RayActorError) else
                       "did not answer" if isinstance(outcome, ShareOverdue) else "failed")
                lost = lost or (f"worker {k} ({entry['host']} pid {entry['pid']}) {how} mid-rung ({why}): the requests of "
                                f"its {len(shares[k])} user(s) are lost with it")
            else:
                c = clock[k]
                assert isinstance(c, dict)
                entry.update(c, requests=len(outcome))
                merged.extend((k, _reconciled(RequestResult.from_dict(d), c)) for d in outcome)
            workers.append(entry)
        merged.sort(key=lambda kr: (kr[1].t_sent_ns + round((kr[1].end_s or 0.0) * 1e9), kr[0]))
        return RungOutcome(merged, workers, lost)

    async def _shares(self, calls: dict, deadline_s: float) -> dict:
        """Each worker's share (its requests, or the exception that ended it); a worker with no answer by
        ``deadline_s`` gets ShareOverdue and is killed (it may still be sending requests to the server)."""
        tasks = {k: asyncio.ensure_future(ref) for k, ref in calls.items()}
        for task in tasks.values():  # a share ended by an interruption still has its exception read (no asyncio warning)
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
        if not tasks:
            return {}
        await self.wait_shares(tasks, deadline_s)
        got: dict = {}
        for k, task in tasks.items():
            if task.done():
                got[k] = task.exception() or task.result()
            else:
                task.cancel()
                ray.kill(self.actors[k])
                got[k] = ShareOverdue(f"no answer {deadline_s:.0f} s after the rung began (the rung's duration, one "
                                      "request's --timeout and SHARE_GRACE_S): a partitioned or hung host; killed")
        return got

    async def _take(self, calls: dict, clock: dict) -> list[tuple[int, RequestResult]]:
        """The requests each worker of an interrupted rung had completed, on the coordinator's clocks."""
        out: list[tuple[int, RequestResult]] = []
        for k in calls:
            try:
                done = await asyncio.wait_for(self.actors[k].take.remote(), TAKE_TIMEOUT_S)
            except (ray.exceptions.RayError, TimeoutError):
                continue  # a worker that cannot answer: its requests are lost with it, as when it dies
            out.extend((k, _reconciled(RequestResult.from_dict(d), clock[k])) for d in done)
        return out

    async def close(self) -> None:
        for a in self.actors:
            ray.kill(a)
        self.actors = []
        if self._owned:
            ray.shutdown()
            self._owned = False


def _signal_handlers() -> dict:
    """This process's SIGINT and SIGTERM handlers, as Python holds them (the measure commands' own: they end a
    run with its record kept and an 'interrupted' event, exit 130 or 143)."""
    return {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}


def _restore(handlers: dict) -> None:
    """Put back the handlers ``ray.init`` replaced: its driver installs a native handler that ends the process
    at SIGTERM (exit 15: no 'interrupted' event, the workers left to Ray's own clean-up)."""
    for sig, handler in handlers.items():
        if handler is not None:
            try:
                signal.signal(sig, handler)
            except ValueError:  # not the main thread: nothing of ours was installed there
                pass


def _reconciled(r: RequestResult, clock: dict) -> RequestResult:
    """A worker's request on the coordinator's clocks (its durations are the worker's own differences)."""
    r.wall_time -= clock["wall_offset_s"]
    r.t_sent_ns -= clock["mono_offset_ns"]
    return r
