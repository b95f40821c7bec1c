from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="BalanceResponse")


@_attrs_define
class BalanceResponse:
    """
    Attributes:
        account_id (str):
        timestamp (int): The time the figures are for: the time a balance read asked for, otherwise the account's clock
            (the latest timestamp of its accepted writes).
        balance (int): available - debt; negative means debt.
        available (int): Active (unexpired, unconsumed) credits.
        debt (int): Outstanding debt.
        watermark (int): The account's watermark (SPEC section 6): writes must have a timestamp at or after it; entries
            before it are final. With a lateness window of 0, the clock.
        final (bool): True when the figures can no longer change: a time before the watermark. Later times may still be
            restated by late writes.
        resource (None | str | Unset): The GPU class read (`?resource=`); null: totals over every class.
    """

    account_id: str
    timestamp: int
    balance: int
    available: int
    debt: int
    watermark: int
    final: bool
    resource: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        account_id = self.account_id

        timestamp = self.timestamp

        balance = self.balance

        available = self.available

        debt = self.debt

        watermark = self.watermark

        final = self.final

        resource: None | str | Unset
        if isinstance(self.resource, Unset):
            resource = UNSET
        else:
            resource = self.resource

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "account_id": account_id,
                "timestamp": timestamp,
                "balance": balance,
                "available": available,
                "debt": debt,
                "watermark": watermark,
                "final": final,
            }
        )
        if resource is not UNSET:
            field_dict["resource"] = resource

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        account_id = d.pop("account_id")

        timestamp = d.pop("timestamp")

        balance = d.pop("balance")

        available = d.pop("available")

        debt = d.pop("debt")

        watermark = d.pop("watermark")

        final = d.pop("final")

        def _parse_resource(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        resource = _parse_resource(d.pop("resource", UNSET))

        balance_response = cls(
            account_id=account_id,
            timestamp=timestamp,
            balance=balance,
            available=available,
            debt=debt,
            watermark=watermark,
            final=final,
            resource=resource,
        )

        balance_response.additional_properties = d
        return balance_response

    @property
    def additional_keys(self) -> list[str]:
        return list(self.additional_properties.keys())

    def __getitem__(self, key: str) -> Any:
        return self.additional_properties[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.additional_properties[key] = value

    def __delitem__(self, key: str) -> None:
        del self.additional_properties[key]

    def __contains__(self, key: str) -> bool:
        return key in self.additional_properties
