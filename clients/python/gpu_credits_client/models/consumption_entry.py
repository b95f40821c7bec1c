from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.allocation_item import AllocationItem


T = TypeVar("T", bound="ConsumptionEntry")


@_attrs_define
class ConsumptionEntry:
    """
    Attributes:
        sequence (int): The entry's identity, given in the order entries were made (a late write's entry gets the next
            one although it is listed earlier).
        timestamp (int): When it took effect (an expiration: the expiry).
        balance (int): Balance right after this entry, in effective order.
        available (int):
        debt (int):
        revision (int): How many times a late write restated this entry's effect.
        final (bool): Before the account's watermark: this entry will never change again.
        kind (Literal['consumption']):
        amount (int):
        consumed (int):
        debt_added (int):
        allocation (list[AllocationItem]):
        resource (None | str): The GPU class it ran on; null: none.
    """

    sequence: int
    timestamp: int
    balance: int
    available: int
    debt: int
    revision: int
    final: bool
    kind: Literal["consumption"]
    amount: int
    consumed: int
    debt_added: int
    allocation: list[AllocationItem]
    resource: None | str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        sequence = self.sequence

        timestamp = self.timestamp

        balance = self.balance

        available = self.available

        debt = self.debt

        revision = self.revision

        final = self.final

        kind = self.kind

        amount = self.amount

        consumed = self.consumed

        debt_added = self.debt_added

        allocation = []
        for allocation_item_data in self.allocation:
            allocation_item = allocation_item_data.to_dict()
            allocation.append(allocation_item)

        resource: None | str
        resource = self.resource

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "sequence": sequence,
                "timestamp": timestamp,
                "balance": balance,
                "available": available,
                "debt": debt,
                "revision": revision,
                "final": final,
                "kind": kind,
                "amount": amount,
                "consumed": consumed,
                "debt_added": debt_added,
                "allocation": allocation,
                "resource": resource,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.allocation_item import AllocationItem  # noqa: PLC0415

        d = dict(src_dict)
        sequence = d.pop("sequence")

        timestamp = d.pop("timestamp")

        balance = d.pop("balance")

        available = d.pop("available")

        debt = d.pop("debt")

        revision = d.pop("revision")

        final = d.pop("final")

        kind = cast(Literal["consumption"], d.pop("kind"))
        if kind != "consumption":
            raise ValueError(f"kind must match const 'consumption', got '{kind}'")

        amount = d.pop("amount")

        consumed = d.pop("consumed")

        debt_added = d.pop("debt_added")

        allocation = []
        _allocation = d.pop("allocation")
        for allocation_item_data in _allocation:
            allocation_item = AllocationItem.from_dict(allocation_item_data)

            allocation.append(allocation_item)

        def _parse_resource(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        resource = _parse_resource(d.pop("resource"))

        consumption_entry = cls(
            sequence=sequence,
            timestamp=timestamp,
            balance=balance,
            available=available,
            debt=debt,
            revision=revision,
            final=final,
            kind=kind,
            amount=amount,
            consumed=consumed,
            debt_added=debt_added,
            allocation=allocation,
            resource=resource,
        )

        consumption_entry.additional_properties = d
        return consumption_entry

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
