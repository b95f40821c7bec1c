"""One round of a SIGKILL crash test (tests/test_crash.py, tests/test_crash_late.py): load
runs until enough writes are acknowledged, or until something already failed, and then the
server is killed."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass
class Round:
    kill_after_acks: int
    acked: int = 0
    failures: list[str] = field(default_factory=list)
    trigger: asyncio.Event = field(default_factory=asyncio.Event)

    def ack(self) -> None:
        self.acked += 1
        if self.acked >= self.kill_after_acks:
            self.trigger.set()

    def fail(self, message: str) -> None:
        self.failures.append(message)
        self.trigger.set()  # no point in waiting for more load
