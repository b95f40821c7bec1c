from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="VoidEntry")


@_attrs_define
class VoidEntry:
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
        kind (Literal['void']):
        grant_id (int):
        amount (int): The grant's live remainder removed (0 if it was used up or expired).
    """

    sequence: int
    timestamp: int
    balance: int
    available: int
    debt: int
    revision: int
    final: bool
    kind: Literal["void"]
    grant_id: int
    amount: int
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

        grant_id = self.grant_id

        amount = self.amount

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
                "grant_id": grant_id,
                "amount": amount,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        sequence = d.pop("sequence")

        timestamp = d.pop("timestamp")

        balance = d.pop("balance")

        available = d.pop("available")

        debt = d.pop("debt")

        revision = d.pop("revision")

        final = d.pop("final")

        kind = cast(Literal["void"], d.pop("kind"))
        if kind != "void":
            raise ValueError(f"kind must match const 'void', got '{kind}'")

        grant_id = d.pop("grant_id")

        amount = d.pop("amount")

        void_entry = cls(
            sequence=sequence,
            timestamp=timestamp,
            balance=balance,
            available=available,
            debt=debt,
            revision=revision,
            final=final,
            kind=kind,
            grant_id=grant_id,
            amount=amount,
        )

        void_entry.additional_properties = d
        return void_entry

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
