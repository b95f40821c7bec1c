from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="ConsumeEvent")


@_attrs_define
class ConsumeEvent:
    """
    Attributes:
        op (Literal['consume']):
        account_id (str):
        amount (int): Credits, 1 to 2^53-1.
        timestamp (int): Caller's time, 0 to 2^53-1; never decreases per account.
        id (str): The client's id for this line: 1 to 128 printable ASCII characters, not starting with a space; unique
            per account. A line whose id the account already applied answers `duplicate` and changes nothing.
        resource (None | str | Unset): The GPU class the usage ran on: grants that list it or are unrestricted pay.
            Omitted or null: no class; only unrestricted grants pay.
    """

    op: Literal["consume"]
    account_id: str
    amount: int
    timestamp: int
    id: str
    resource: None | str | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        op = self.op

        account_id = self.account_id

        amount = self.amount

        timestamp = self.timestamp

        id = self.id

        resource: None | str | Unset
        if isinstance(self.resource, Unset):
            resource = UNSET
        else:
            resource = self.resource

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "op": op,
                "account_id": account_id,
                "amount": amount,
                "timestamp": timestamp,
                "id": id,
            }
        )
        if resource is not UNSET:
            field_dict["resource"] = resource

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        op = cast(Literal["consume"], d.pop("op"))
        if op != "consume":
            raise ValueError(f"op must match const 'consume', got '{op}'")

        account_id = d.pop("account_id")

        amount = d.pop("amount")

        timestamp = d.pop("timestamp")

        id = d.pop("id")

        def _parse_resource(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        resource = _parse_resource(d.pop("resource", UNSET))

        consume_event = cls(
            op=op,
            account_id=account_id,
            amount=amount,
            timestamp=timestamp,
            id=id,
            resource=resource,
        )

        return consume_event
