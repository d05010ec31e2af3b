"""Small traces written as data, for the simulator's worked examples (imported by the tests beside it)."""

from __future__ import annotations

import numpy as np

from servesize.simulate.traces import ReadReport, SessionInfo, TraceBuilder


def make_trace(requests, *, block_size=16, clock="trace", name="worked example"):
    """``requests``: (session key, t_s, prompt tokens, ids, output tokens[, service_s]) in file order.

    ``ids`` are the trace's block ids (one per block_size tokens from the prompt's start); sessions are made
    in order of first appearance."""
    b = TraceBuilder("synthetic", block_size, clock, ReadReport(name, format="synthetic"))
    keys: dict = {}
    for row in requests:
        key, t, tokens, ids, out = row[:5]
        service = row[5] if len(row) > 5 else float("nan")
        if key not in keys:
            keys[key] = b.add_session(SessionInfo(str(key)))
        b.add_request(keys[key], float(t), int(tokens), int(out), np.asarray(ids, dtype=np.int64), service_s=service)
    return b.build(name)
