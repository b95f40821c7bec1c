from enum import StrEnum


class BatchResultOp(StrEnum):
    BALANCE = "balance"
    CONSUME = "consume"
    GRANT = "grant"
    VOID = "void"

    def __str__(self) -> str:
        return str(self.value)
