"""The random numbers behind sampled requests, kept apart from what they mean.

A request needs, whatever the workload's parameters (working-set-model.md 2.6 steps 1-3):

- a 32-bit word that decides its class: subagent when word < r/(1+r) x 2**32 (exact to 2**-32);
- a second, independent 32-bit word that decides coldness: cold when word < f x 2**32;
- one standard normal z for a log-normal length, ln L = mu + sigma z. Box-Muller on float32
  uniforms: exact normals, tails cut at sqrt(-2 ln 2**-24) = 5.77 sigma, a 1e-8 event;
- for an empirical class only, a uniform u in [0, 1): the bootstrap picks length floor(u x n).

``Workload.realise`` turns these into lengths, prefixes and flags. Because the numbers do not
depend on the parameters, the same numbers realised under a neighbouring workload (a longer
median, a higher f) move every session smoothly: common random numbers across a sweep.

``RandomBank`` holds them for a Monte-Carlo of fills x sessions, drawn in blocks of
``ROWS`` fills x ``COLS`` sessions, block (i, j) from its own generator seeded (seed, i, j).
Fill k's first n sessions are therefore the same however many fills and sessions are drawn:
a fill that needs more sessions extends its own row, a run with fewer fills reads the first
rows of a longer one, and nothing is drawn that no fill reaches.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from servesize.frozen import frozen

if TYPE_CHECKING:  # numpy loads where a function needs it (the CLI starts without it)
    import numpy as np


UNIFORM_STREAM = 1  # the bootstrap uniforms come from generator (seed, i, j, 1): drawn only when needed


@frozen
class RawDraw:
    """The random numbers of a block of requests (any shape), before any arithmetic."""

    class_word: np.ndarray       # uint32: subagent when below r/(1+r) x 2**32
    cold_word: np.ndarray        # uint32: cold when below f x 2**32
    z: np.ndarray                # float32 standard normals (log-normal lengths)
    u: np.ndarray | None = None  # float64 uniforms in [0, 1) (bootstrap picks), None when no class is empirical

    @property
    def shape(self) -> tuple:
        return self.z.shape

    def __getitem__(self, index) -> RawDraw:
        """The same numbers for a sub-block, e.g. ``raw[:, :100]`` or ``raw[rows]``."""
        return RawDraw(self.class_word[index], self.cold_word[index], self.z[index],
                       None if self.u is None else self.u[index])

    @staticmethod
    def stack(parts: list[RawDraw], axis: int) -> RawDraw:
        """Blocks joined along fills (axis 0) or sessions (axis 1)."""
        import numpy as np
        if len(parts) == 1:
            return parts[0]
        u = None if parts[0].u is None else np.concatenate([p.u for p in parts], axis=axis)
        return RawDraw(np.concatenate([p.class_word for p in parts], axis=axis),
                       np.concatenate([p.cold_word for p in parts], axis=axis),
                       np.concatenate([p.z for p in parts], axis=axis), u)


def _normals(rng: np.random.Generator, n: int) -> np.ndarray:
    import numpy as np
    m = (n + 1) // 2
    u = rng.random((2, m), dtype=np.float32)
    radius = np.sqrt(np.float32(-2.0) * np.log(np.float32(1.0) - u[0]))
    theta = np.float32(2.0 * math.pi) * u[1]
    return np.concatenate([radius * np.cos(theta), radius * np.sin(theta)])[:n]


def draw_numbers(rng: np.random.Generator, shape: tuple, uniforms: bool = False) -> RawDraw:
    """Every number ``shape`` requests need, from ``rng``: two words each (one 64-bit draw), then the normals,
    then (``uniforms``) the bootstrap uniforms."""
    import numpy as np
    n = int(np.prod(shape))
    words = rng.bit_generator.random_raw(n).view(np.uint32).reshape(tuple(shape) + (2,))
    z = _normals(rng, n).reshape(shape)
    u = rng.random(shape) if uniforms else None
    return RawDraw(words[..., 0], words[..., 1], z, u)


class RandomBank:
    """The random numbers of a fills x sessions Monte-Carlo, drawn block by block and kept.

    ``take(r0, r1, c0, c1)`` gives fills [r0, r1) x sessions [c0, c1), drawing the blocks it
    covers that are not drawn yet; within one column block it is a view, no copy. Each column
    block keeps its rows in one array. Blocks are kept up to ``cache_cells`` cells in all; past
    that a block is drawn again when asked for (the same numbers), so memory stays bounded.
    """

    ROWS = 300   # fills per block: 1,500 fills are 5 blocks, 300 (the sensitivity scans) one
    COLS = 64    # sessions per block: a fill's sessions are added one column block at a time

    def __init__(self, seed: int = 0, uniforms: bool = False, cache_cells: int = 4_000_000):
        self.seed = int(seed)
        self.uniforms = bool(uniforms)
        self.cache_cells = int(cache_cells)
        self._kept: dict[int, RawDraw] = {}   # column block -> its first rows (a multiple of ROWS)
        self._cells = 0

    def _block(self, i: int, j: int) -> RawDraw:
        import numpy as np
        raw = draw_numbers(np.random.default_rng([self.seed, i, j]), (self.ROWS, self.COLS))
        if self.uniforms:
            raw = RawDraw(raw.class_word, raw.cold_word, raw.z,
                          np.random.default_rng([self.seed, i, j, UNIFORM_STREAM]).random((self.ROWS, self.COLS)))
        return raw

    def _rows(self, j: int, i0: int, i1: int) -> RawDraw:
        """Row blocks [i0, i1) of column block j, stacked."""
        return RawDraw.stack([self._block(i, j) for i in range(i0, i1)], axis=0)

    def _column(self, j: int, r0: int, r1: int) -> tuple[RawDraw, int]:
        """Column block j holding fills [r0, r1), and the fill its first row is: the kept rows [0, ...) when
        they fit the memory bound, else just the row blocks that cover [r0, r1), drawn again and not kept."""
        need = -(-r1 // self.ROWS)
        kept = self._kept.get(j)
        have = 0 if kept is None else kept.shape[0] // self.ROWS
        if kept is not None and have >= need:
            return kept, 0
        more = (need - have) * self.ROWS * self.COLS
        if self._cells + more > self.cache_cells:
            return self._rows(j, r0 // self.ROWS, need), r0 // self.ROWS * self.ROWS
        new = self._rows(j, have, need)
        if kept is not None:
            new = RawDraw.stack([kept, new], axis=0)
        self._kept[j] = new
        self._cells += more
        return new, 0

    def take(self, r0: int, r1: int, c0: int, c1: int) -> RawDraw:
        """The numbers of fills [r0, r1) x sessions [c0, c1)."""
        if not (0 <= r0 < r1 and 0 <= c0 < c1):
            raise ValueError(f"empty or negative range: fills [{r0}, {r1}), sessions [{c0}, {c1})")
        parts = []
        for j in range(c0 // self.COLS, -(-c1 // self.COLS)):
            lo, hi = max(c0 - j * self.COLS, 0), min(c1 - j * self.COLS, self.COLS)
            block, first = self._column(j, r0, r1)
            parts.append(block[r0 - first:r1 - first, lo:hi])
        return RawDraw.stack(parts, axis=1)
