"""The pure core of the ledger: standard library only, time passed in, no I/O."""

from app.domain.tracker import (
    MAX_VALUE,
    BalanceResult,
    Batch,
    ConsumeResult,
    Draw,
    Expiration,
    GPUCreditTracker,
    GrantResult,
    InvalidInput,
    LedgerError,
    TimestampRegression,
    TotalOverflow,
    TrackerState,
)

__all__ = [
    "MAX_VALUE",
    "BalanceResult",
    "Batch",
    "ConsumeResult",
    "Draw",
    "Expiration",
    "GPUCreditTracker",
    "GrantResult",
    "InvalidInput",
    "LedgerError",
    "TimestampRegression",
    "TotalOverflow",
    "TrackerState",
]
