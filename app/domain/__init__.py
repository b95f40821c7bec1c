"""The pure core of the ledger: standard library only, time passed in, no I/O."""

from app.domain.tracker import (
    DEFAULT_MAX_LIVE_GRANTS,
    MAX_VALUE,
    Allocation,
    BalanceResult,
    ConsumeResult,
    Expiration,
    GPUCreditTracker,
    GrantResult,
    InvalidInput,
    LedgerError,
    LiveGrant,
    LiveGrantLimit,
    NoLiveRoom,
    TimestampRegression,
    TotalOverflow,
    TrackerState,
)

__all__ = [
    "DEFAULT_MAX_LIVE_GRANTS",
    "MAX_VALUE",
    "Allocation",
    "BalanceResult",
    "ConsumeResult",
    "Expiration",
    "GPUCreditTracker",
    "GrantResult",
    "InvalidInput",
    "LedgerError",
    "LiveGrant",
    "LiveGrantLimit",
    "NoLiveRoom",
    "TimestampRegression",
    "TotalOverflow",
    "TrackerState",
]
