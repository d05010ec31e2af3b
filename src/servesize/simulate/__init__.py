"""Replay request traces through a vLLM-faithful prefix cache.

    traces.py     the trace formats (Claude Code sessions, Mooncake, OpenAI-style logs with
                  cached_tokens, servesize measure records) -> one Trace: requests with their
                  chained prefix-block ids
    synthetic.py  a servesize Workload -> the same events (sessions, think times, subagents)
    replay.py     a Trace -> the requests one replay sends: which requests, how sessions are
                  aligned in time, N users, the engine's block size, the warm-up window
    cache.py      the exact simulator of vLLM's block pool (free queue, LRU, pinning, the cap)
    curve.py      the hit rate at every pool size in one pass (LRU stack distances), and FIFO
                  and Belady's optimum at chosen sizes as bounds
    users.py      a curve -> users at a target hit rate; a Workload fitted from a trace
    result.py     what ``servesize.api.simulate`` returns

Every output states the choices that made it (warm-up, alignment, requests, block size, service
times), because a hit rate means nothing without them (docs/simulate.md).
"""
