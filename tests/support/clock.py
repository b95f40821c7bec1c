"""A clock the test sets by hand, in seconds, for code that takes its clock as an argument
(the ledger's ``wall_clock_s``: key retention and sweeps; the authentication log's
``monotonic_s``): time moves only when the test moves it."""

from __future__ import annotations


class ManualClock:
    def __init__(self, now_s: float = 1_000.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s
