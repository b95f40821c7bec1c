"""Balance over time as an SVG chart, computed here and drawn by the page's template: no
script, nothing loaded, the same picture in every browser and in the HTML itself.

Pure: ledger entries in, geometry out. The x axis is the ledger's own time (the callers'
timestamps, in their units), from the first entry shown to the last; the y axis holds the
credits, with 0 always in view. Each entry is a point at its time and the balance right
after it. Between entries the totals hold, so the lines are steps: the balance, the
available credits as an area above 0 and the debt as an area below it (with GPU classes
both can be non-zero at once).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from app.storage.base import Entry

WIDTH: Final = 960
HEIGHT: Final = 320
LEFT: Final = 150  # room for a 16-digit figure
RIGHT: Final = 24
TOP: Final = 16
BOTTOM: Final = 40
PLOT_WIDTH: Final = WIDTH - LEFT - RIGHT
PLOT_HEIGHT: Final = HEIGHT - TOP - BOTTOM


@dataclass(frozen=True, slots=True)
class Point:
    x: float
    y: float
    sequence: int
    kind: str
    timestamp: int
    balance: int
    available: int
    debt: int


@dataclass(frozen=True, slots=True)
class Tick:
    at: float  # pixel coordinate along its axis
    label: int


@dataclass(frozen=True, slots=True)
class Chart:
    points: list[Point]
    balance_path: str  # the balance as a step line
    available_path: str  # the available credits, an area from 0 up
    debt_path: str  # the debt, an area from 0 down
    zero_y: float
    y_ticks: list[Tick]
    x_ticks: list[Tick]
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right_edge: int = WIDTH - RIGHT
    top: int = TOP
    bottom_edge: int = HEIGHT - BOTTOM


def px(value: float) -> str:
    """A coordinate as the SVG carries it (one decimal at most)."""
    return f"{value:.1f}".removesuffix(".0")


def chart(entries: Sequence[Entry]) -> Chart:
    """The chart of ``entries`` (in effective order, at least one)."""
    assert entries, "an account exists once it has an entry"
    first, last = entries[0].timestamp, entries[-1].timestamp
    y_max = max(0, *(e.available for e in entries), *(e.available - e.debt for e in entries))
    y_min = min(0, *(-e.debt for e in entries))
    if y_max == y_min:  # all zero: 0 at the bottom
        y_max = 1

    def x_of(timestamp: int) -> float:
        if last == first:
            return LEFT + PLOT_WIDTH / 2
        return LEFT + (timestamp - first) * PLOT_WIDTH / (last - first)

    def y_of(value: int) -> float:
        return TOP + (y_max - value) * PLOT_HEIGHT / (y_max - y_min)

    points = [
        Point(
            x_of(e.timestamp),
            y_of(e.available - e.debt),
            e.sequence,
            e.kind,
            e.timestamp,
            e.available - e.debt,
            e.available,
            e.debt,
        )
        for e in entries
    ]
    zero_y = y_of(0)
    return Chart(
        points=points,
        balance_path=_steps(points, [p.y for p in points]),
        available_path=_area(points, [y_of(p.available) for p in points], zero_y),
        debt_path=_area(points, [y_of(-p.debt) for p in points], zero_y),
        zero_y=zero_y,
        y_ticks=[Tick(y_of(v), v) for v in sorted({y_max, 0, y_min}, reverse=True)],
        x_ticks=[Tick(x_of(t), t) for t in sorted({first, last})],
    )


def _steps(points: Sequence[Point], ys: Sequence[float]) -> str:
    """A step line through the points: level until the next entry, then up or down."""
    parts = [f"M{px(points[0].x)},{px(ys[0])}"]
    for point, y in zip(points[1:], ys[1:], strict=True):
        parts.append(f"H{px(point.x)}V{px(y)}")
    return "".join(parts)


def _area(points: Sequence[Point], ys: Sequence[float], zero_y: float) -> str:
    """The area between 0 and a step line (closed back along 0)."""
    line = _steps(points, ys)
    return f"M{px(points[0].x)},{px(zero_y)}L{line[1:]}V{px(zero_y)}Z"
