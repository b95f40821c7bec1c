"""The pure core of the ledger: standard library only, time passed in, no I/O."""

from app.domain.tracker import (
    DEFAULT_MAX_LIVE_BATCHES,
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
    LiveBatchLimit,
    NoLiveRoom,
    TimestampRegression,
    TotalOverflow,
    TrackerState,
)

__all__ = [
    "DEFAULT_MAX_LIVE_BATCHES",
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
    "LiveBatchLimit",
    "NoLiveRoom",
    "TimestampRegression",
    "TotalOverflow",
    "TrackerState",
]
