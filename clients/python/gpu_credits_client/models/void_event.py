from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar, cast

from attrs import define as _attrs_define

T = TypeVar("T", bound="VoidEvent")


@_attrs_define
class VoidEvent:
    """
    Attributes:
        op (Literal['void']):
        account_id (str):
        grant_id (int):
        timestamp (int): Caller's time, 0 to 2^53-1; never decreases per account.
        id (str): The client's id for this line: 1 to 128 printable ASCII characters, not starting with a space; unique
            per account. A line whose id the account already applied answers `duplicate` and changes nothing.
    """

    op: Literal["void"]
    account_id: str
    grant_id: int
    timestamp: int
    id: str

    def to_dict(self) -> dict[str, Any]:
        op = self.op

        account_id = self.account_id

        grant_id = self.grant_id

        timestamp = self.timestamp

        id = self.id

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "op": op,
                "account_id": account_id,
                "grant_id": grant_id,
                "timestamp": timestamp,
                "id": id,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        op = cast(Literal["void"], d.pop("op"))
        if op != "void":
            raise ValueError(f"op must match const 'void', got '{op}'")

        account_id = d.pop("account_id")

        grant_id = d.pop("grant_id")

        timestamp = d.pop("timestamp")

        id = d.pop("id")

        void_event = cls(
            op=op,
            account_id=account_id,
            grant_id=grant_id,
            timestamp=timestamp,
            id=id,
        )

        return void_event
