from enum import StrEnum


class VersionInfoStorage(StrEnum):
    MEMORY = "memory"
    POSTGRES = "postgres"
    SQLITE = "sqlite"

    def __str__(self) -> str:
        return str(self.value)
