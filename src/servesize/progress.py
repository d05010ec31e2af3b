"""What long work reports as it goes, typed once for every module that takes a progress callback."""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str], None]        # a line of text: what is being done now ("replaying 1,200 sessions ...")
Counted = Callable[[int, int], None]    # (done, total): a pass over known work, for a bar or a percentage
