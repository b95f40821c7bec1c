from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="ConsumeRequest")


@_attrs_define
class ConsumeRequest:
    """
    Attributes:
        amount (int): Credits, 1 to 2^53-1.
        timestamp (int): Caller's time, 0 to 2^53-1; never decreases per account.
        resource (None | str | Unset): The GPU class the usage ran on: grants that list it or are unrestricted pay.
            Omitted or null: no class; only unrestricted grants pay.
    """

    amount: int
    timestamp: int
    resource: None | str | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        amount = self.amount

        timestamp = self.timestamp

        resource: None | str | Unset
        if isinstance(self.resource, Unset):
            resource = UNSET
        else:
            resource = self.resource

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "amount": amount,
                "timestamp": timestamp,
            }
        )
        if resource is not UNSET:
            field_dict["resource"] = resource

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        amount = d.pop("amount")

        timestamp = d.pop("timestamp")

        def _parse_resource(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        resource = _parse_resource(d.pop("resource", UNSET))

        consume_request = cls(
            amount=amount,
            timestamp=timestamp,
            resource=resource,
        )

        return consume_request
