from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.grant_entry_metadata_type_0 import GrantEntryMetadataType0


T = TypeVar("T", bound="GrantEntry")


@_attrs_define
class GrantEntry:
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
        kind (Literal['grant']):
        grant_id (int):
        amount (int):
        expiry (int):
        settled_debt (int):
        retained (int):
        resources (list[str] | None): The grant's GPU classes, sorted; null: unrestricted.
        name (None | str): The grant's name, if it was given one.
        metadata (GrantEntryMetadataType0 | None): The grant's metadata, if any.
    """

    sequence: int
    timestamp: int
    balance: int
    available: int
    debt: int
    revision: int
    final: bool
    kind: Literal["grant"]
    grant_id: int
    amount: int
    expiry: int
    settled_debt: int
    retained: int
    resources: list[str] | None
    name: None | str
    metadata: GrantEntryMetadataType0 | None
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.grant_entry_metadata_type_0 import GrantEntryMetadataType0  # noqa: PLC0415

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

        expiry = self.expiry

        settled_debt = self.settled_debt

        retained = self.retained

        resources: list[str] | None
        if isinstance(self.resources, list):
            resources = self.resources

        else:
            resources = self.resources

        name: None | str
        name = self.name

        metadata: dict[str, Any] | None
        if isinstance(self.metadata, GrantEntryMetadataType0):
            metadata = self.metadata.to_dict()
        else:
            metadata = self.metadata

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
                "expiry": expiry,
                "settled_debt": settled_debt,
                "retained": retained,
                "resources": resources,
                "name": name,
                "metadata": metadata,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.grant_entry_metadata_type_0 import GrantEntryMetadataType0  # noqa: PLC0415

        d = dict(src_dict)
        sequence = d.pop("sequence")

        timestamp = d.pop("timestamp")

        balance = d.pop("balance")

        available = d.pop("available")

        debt = d.pop("debt")

        revision = d.pop("revision")

        final = d.pop("final")

        kind = cast(Literal["grant"], d.pop("kind"))
        if kind != "grant":
            raise ValueError(f"kind must match const 'grant', got '{kind}'")

        grant_id = d.pop("grant_id")

        amount = d.pop("amount")

        expiry = d.pop("expiry")

        settled_debt = d.pop("settled_debt")

        retained = d.pop("retained")

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

        def _parse_name(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        name = _parse_name(d.pop("name"))

        def _parse_metadata(data: object) -> GrantEntryMetadataType0 | None:
            if data is None:
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                metadata_type_0 = GrantEntryMetadataType0.from_dict(data)

                return metadata_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(GrantEntryMetadataType0 | None, data)

        metadata = _parse_metadata(d.pop("metadata"))

        grant_entry = cls(
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
            expiry=expiry,
            settled_debt=settled_debt,
            retained=retained,
            resources=resources,
            name=name,
            metadata=metadata,
        )

        grant_entry.additional_properties = d
        return grant_entry

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
