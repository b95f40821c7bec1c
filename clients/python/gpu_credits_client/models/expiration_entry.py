from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="ExpirationEntry")


@_attrs_define
class ExpirationEntry:
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
        kind (Literal['expiration']):
        grant_id (int):
        expiry (int):
        amount (int): Credits that expired unused.
        resources (list[str] | None): The grant's GPU classes, sorted; null: unrestricted.
    """

    sequence: int
    timestamp: int
    balance: int
    available: int
    debt: int
    revision: int
    final: bool
    kind: Literal["expiration"]
    grant_id: int
    expiry: int
    amount: int
    resources: list[str] | None
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

        expiry = self.expiry

        amount = self.amount

        resources: list[str] | None
        if isinstance(self.resources, list):
            resources = self.resources

        else:
            resources = self.resources

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
                "expiry": expiry,
                "amount": amount,
                "resources": resources,
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

        kind = cast(Literal["expiration"], d.pop("kind"))
        if kind != "expiration":
            raise ValueError(f"kind must match const 'expiration', got '{kind}'")

        grant_id = d.pop("grant_id")

        expiry = d.pop("expiry")

        amount = d.pop("amount")

        def _parse_resources(data: object) -> list[str] | None:
            if data is None:
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                resources_type_0 = cast(list[str], data)

                return resources_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[str] | None, data)

        resources = _parse_resources(d.pop("resources"))

        expiration_entry = cls(
            sequence=sequence,
            timestamp=timestamp,
            balance=balance,
            available=available,
            debt=debt,
            revision=revision,
            final=final,
            kind=kind,
            grant_id=grant_id,
            expiry=expiry,
            amount=amount,
            resources=resources,
        )

        expiration_entry.additional_properties = d
        return expiration_entry

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
