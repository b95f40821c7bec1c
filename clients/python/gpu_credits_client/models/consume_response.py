from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.allocation_item import AllocationItem


T = TypeVar("T", bound="ConsumeResponse")


@_attrs_define
class ConsumeResponse:
    """
    Attributes:
        account_id (str):
        timestamp (int): The time the figures are for: the time a balance read asked for, otherwise the account's clock
            (the latest timestamp of its accepted writes).
        balance (int): available - debt; negative means debt.
        available (int): Active (unexpired, unconsumed) credits.
        debt (int): Outstanding debt.
        resource (None | str): The GPU class it ran on; null: none.
        watermark (int): The account's watermark (SPEC section 6): writes must have a timestamp at or after it; entries
            before it are final. With a lateness window of 0, the clock.
        sequence (int): Position of this consumption in the ledger.
        amount (int):
        consumed (int): How much active credits covered.
        debt_added (int): How much became new debt.
        allocation (list[AllocationItem]): Grants drawn from, in the order they were drawn (earliest expiry first).
        restated (int): How many later ledger entries this write changed the effect of (a late write, SPEC section 6; 0
            for a write in timestamp order).
        dry_run (bool | Unset): Present, and true, only in the answer to `?dry_run=true`: what this consumption would do
            if it were sent now (its `sequence` the one it would get), and nothing was recorded. Absent from a real
            consumption's answer. Default: False.
    """

    account_id: str
    timestamp: int
    balance: int
    available: int
    debt: int
    resource: None | str
    watermark: int
    sequence: int
    amount: int
    consumed: int
    debt_added: int
    allocation: list[AllocationItem]
    restated: int
    dry_run: bool | Unset = False
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        account_id = self.account_id

        timestamp = self.timestamp

        balance = self.balance

        available = self.available

        debt = self.debt

        resource: None | str
        resource = self.resource

        watermark = self.watermark

        sequence = self.sequence

        amount = self.amount

        consumed = self.consumed

        debt_added = self.debt_added

        allocation = []
        for allocation_item_data in self.allocation:
            allocation_item = allocation_item_data.to_dict()
            allocation.append(allocation_item)

        restated = self.restated

        dry_run = self.dry_run

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "account_id": account_id,
                "timestamp": timestamp,
                "balance": balance,
                "available": available,
                "debt": debt,
                "resource": resource,
                "watermark": watermark,
                "sequence": sequence,
                "amount": amount,
                "consumed": consumed,
                "debt_added": debt_added,
                "allocation": allocation,
                "restated": restated,
            }
        )
        if dry_run is not UNSET:
            field_dict["dry_run"] = dry_run

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.allocation_item import AllocationItem  # noqa: PLC0415

        d = dict(src_dict)
        account_id = d.pop("account_id")

        timestamp = d.pop("timestamp")

        balance = d.pop("balance")

        available = d.pop("available")

        debt = d.pop("debt")

        def _parse_resource(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        resource = _parse_resource(d.pop("resource"))

        watermark = d.pop("watermark")

        sequence = d.pop("sequence")

        amount = d.pop("amount")

        consumed = d.pop("consumed")

        debt_added = d.pop("debt_added")

        allocation = []
        _allocation = d.pop("allocation")
        for allocation_item_data in _allocation:
            allocation_item = AllocationItem.from_dict(allocation_item_data)

            allocation.append(allocation_item)

        restated = d.pop("restated")

        dry_run = d.pop("dry_run", UNSET)

        consume_response = cls(
            account_id=account_id,
            timestamp=timestamp,
            balance=balance,
            available=available,
            debt=debt,
            resource=resource,
            watermark=watermark,
            sequence=sequence,
            amount=amount,
            consumed=consumed,
            debt_added=debt_added,
            allocation=allocation,
            restated=restated,
            dry_run=dry_run,
        )

        consume_response.additional_properties = d
        return consume_response

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
