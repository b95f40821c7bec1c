from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.grant_response_metadata_type_0 import GrantResponseMetadataType0


T = TypeVar("T", bound="GrantResponse")


@_attrs_define
class GrantResponse:
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
        grant_id (int): Stable id of this grant within the account.
        sequence (int): Position of this grant in the account's ledger.
        amount (int):
        expiry (int):
        settled_debt (int): How much of the grant paid off debt.
        retained (int): How much was kept as a live grant with the expiry.
        resources (list[str] | None): The grant's GPU classes, sorted; null: unrestricted.
        name (None | str): The grant's name, if it was given one.
        metadata (GrantResponseMetadataType0 | None): The grant's metadata, if any.
        restated (int): How many later ledger entries this write changed the effect of (a late write, SPEC section 6; 0
            for a write in timestamp order).
        resource (None | str | Unset): The GPU class read (`?resource=`); null: totals over every class.
    """

    account_id: str
    timestamp: int
    balance: int
    available: int
    debt: int
    watermark: int
    grant_id: int
    sequence: int
    amount: int
    expiry: int
    settled_debt: int
    retained: int
    resources: list[str] | None
    name: None | str
    metadata: GrantResponseMetadataType0 | None
    restated: int
    resource: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.grant_response_metadata_type_0 import GrantResponseMetadataType0  # noqa: PLC0415

        account_id = self.account_id

        timestamp = self.timestamp

        balance = self.balance

        available = self.available

        debt = self.debt

        watermark = self.watermark

        grant_id = self.grant_id

        sequence = self.sequence

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
        if isinstance(self.metadata, GrantResponseMetadataType0):
            metadata = self.metadata.to_dict()
        else:
            metadata = self.metadata

        restated = self.restated

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
                "grant_id": grant_id,
                "sequence": sequence,
                "amount": amount,
                "expiry": expiry,
                "settled_debt": settled_debt,
                "retained": retained,
                "resources": resources,
                "name": name,
                "metadata": metadata,
                "restated": restated,
            }
        )
        if resource is not UNSET:
            field_dict["resource"] = resource

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.grant_response_metadata_type_0 import GrantResponseMetadataType0  # noqa: PLC0415

        d = dict(src_dict)
        account_id = d.pop("account_id")

        timestamp = d.pop("timestamp")

        balance = d.pop("balance")

        available = d.pop("available")

        debt = d.pop("debt")

        watermark = d.pop("watermark")

        grant_id = d.pop("grant_id")

        sequence = d.pop("sequence")

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

        def _parse_metadata(data: object) -> GrantResponseMetadataType0 | None:
            if data is None:
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                metadata_type_0 = GrantResponseMetadataType0.from_dict(data)

                return metadata_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(GrantResponseMetadataType0 | None, data)

        metadata = _parse_metadata(d.pop("metadata"))

        restated = d.pop("restated")

        def _parse_resource(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        resource = _parse_resource(d.pop("resource", UNSET))

        grant_response = cls(
            account_id=account_id,
            timestamp=timestamp,
            balance=balance,
            available=available,
            debt=debt,
            watermark=watermark,
            grant_id=grant_id,
            sequence=sequence,
            amount=amount,
            expiry=expiry,
            settled_debt=settled_debt,
            retained=retained,
            resources=resources,
            name=name,
            metadata=metadata,
            restated=restated,
            resource=resource,
        )

        grant_response.additional_properties = d
        return grant_response

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
