"""Forecast of a constant burn: when an account's credits run out and what expires unused.

Standard library only, no clock reads, no I/O, like the tracker whose live grants it reads.

The model, exact in integers. A burn of ``R`` credits per timestamp unit of class ``X`` (or of
no class) from the account's clock ``C`` is a consumption of ``R`` credits of that class at
every integer time ``t = C, C+1, C+2, ...`` and nothing else happening: no grant, no other
consumption, no void. Each step follows the ledger's rules (SPEC sections 1 and 5): it draws
the live grants it may draw (unrestricted ones and those listing ``X``; without a class,
unrestricted ones only), earliest expiry first, then the narrower class set, then grant order,
and a grant with expiry ``E`` can pay the steps at ``t < E`` only. So the forecast is exactly
what posting those consumptions would do, and a test checks it that way (step by step on a
copy of the tracker).

- ``run_out_at``: the first step the live credits cannot cover in full (what it lacks, and
  every later step whole, would become debt). Every step before it is covered in full, so
  ``consumed = R * (run_out_at - C) + (what the step at run_out_at drew, less than R)``.
  With ``R >= 1`` it always exists: every grant expires by ``2^53-1``. With nothing to draw it
  is ``C``.
- Per grant: ``consumed`` (what the burn draws from it), ``expiring_unused`` (what is left at
  its expiry, which the ledger will record as an expiration then) and ``used_up_at`` (the
  step that draws its last credit; None when some of it expires).
- Debt is untouched: only grants settle debt (SPEC section 1), and a class with debt has no
  credits a consumption of it could draw (SPEC section 5's invariant), so a forecast for it
  runs out at ``C``.

Cost: O(n) over the n drawable grants, given in consumption order (the tracker lists them so
in O(n log n)); never a step-by-step walk, whatever ``R`` and the expiries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.domain.tracker import MAX_VALUE, InvalidInput, LiveGrant


@dataclass(frozen=True, slots=True)
class GrantForecast:
    """One drawable live grant under the burn."""

    grant_id: int
    expiry: int
    remaining: int  # at the clock, before the burn
    resources: tuple[str, ...] | None
    consumed: int  # what the burn draws from it
    expiring_unused: int  # what is left of it at its expiry (remaining - consumed)
    used_up_at: int | None  # the step drawing its last credit; None if some expires


@dataclass(frozen=True, slots=True)
class Forecast:
    """A burn of ``burn_rate`` credits per timestamp unit from ``start`` (the clock)."""

    start: int
    burn_rate: int
    resource: str | None
    available: int  # what the burn can draw at the start: the sum of the grants' remaining
    consumed: int  # what it draws before it runs out
    expiring_unused: int  # what expires unused (available - consumed)
    run_out_at: int  # the first step not covered in full
    grants: tuple[GrantForecast, ...]  # the drawable grants, in the order drawn


def drawable(grants: Sequence[LiveGrant], resource: str | None) -> list[LiveGrant]:
    """The grants a consumption of class ``resource`` (None: of no class) may draw, in the
    order given: unrestricted ones, and with a class those that list it (SPEC section 5)."""
    if resource is None:
        return [g for g in grants if g.resources is None]
    return [g for g in grants if g.resources is None or resource in g.resources]


def forecast(
    grants: Sequence[LiveGrant], start: int, burn_rate: int, resource: str | None = None
) -> Forecast:
    """The burn of ``burn_rate`` (1 to 2^53-1) credits of class ``resource`` per timestamp
    unit from ``start``, over the live grants at ``start`` in consumption order (all of them,
    or those of ``resource``: the ones it may not draw are left out here). Each grant must
    expire after ``start``, as the live grants at an account's clock do. Raises
    ``InvalidInput`` otherwise."""
    if type(burn_rate) is not int or not 1 <= burn_rate <= MAX_VALUE:
        raise InvalidInput("burn_rate", f"must be an integer from 1 to {MAX_VALUE}")
    if type(start) is not int or not 0 <= start <= MAX_VALUE:
        raise InvalidInput("start", f"must be an integer from 0 to {MAX_VALUE}")
    rate = burn_rate
    t = start  # the step being drawn for
    need = rate  # what the step at ``t`` still lacks (1 to rate)
    last_expiry = start
    results: list[GrantForecast] = []
    for grant in drawable(grants, resource):
        remaining, expiry = grant.remaining, grant.expiry
        if not 1 <= remaining <= MAX_VALUE or not start < expiry <= MAX_VALUE:
            raise InvalidInput("grants", f"grant {grant.grant_id} is not live at {start}")
        if expiry < last_expiry:
            raise InvalidInput("grants", "must be in consumption order (earliest expiry first)")
        last_expiry = expiry
        used_up_at: int | None = None
        if t >= expiry:
            # The burn reached it only after it expired: the earlier grants lasted that long.
            consumed = 0
        else:
            # What it can pay: the rest of step t, then every step up to expiry - 1 in full.
            payable = need + rate * (expiry - 1 - t)
            if remaining > payable:
                consumed = payable
                t, need = expiry, rate
            else:
                consumed = remaining
                if remaining < need:
                    used_up_at, need = t, need - remaining
                else:
                    steps, part = divmod(remaining - need, rate)  # whole steps after t, a rest
                    if part:
                        used_up_at = t + steps + 1
                        t, need = used_up_at, rate - part
                    else:
                        used_up_at = t + steps
                        t, need = used_up_at + 1, rate
        results.append(
            GrantForecast(
                grant.grant_id,
                expiry,
                remaining,
                grant.resources,
                consumed,
                remaining - consumed,
                used_up_at,
            )
        )
    available = sum(g.remaining for g in results)
    consumed_total = sum(g.consumed for g in results)
    assert start <= t <= MAX_VALUE
    assert rate * (t - start) + (rate - need) == consumed_total
    return Forecast(
        start,
        rate,
        resource,
        available,
        consumed_total,
        available - consumed_total,
        t,
        tuple(results),
    )
