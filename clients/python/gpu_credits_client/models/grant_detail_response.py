from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.grant_detail_response_metadata_type_0 import GrantDetailResponseMetadataType0


T = TypeVar("T", bound="GrantDetailResponse")


@_attrs_define
class GrantDetailResponse:
    """
    Attributes:
        account_id (str):
        grant_id (int):
        sequence (int):
        timestamp (int):
        amount (int):
        expiry (int):
        settled_debt (int):
        retained (int):
        remaining (int): Still usable now; 0 once used up or expired.
        resources (list[str] | None): The grant's GPU classes, sorted; null: unrestricted.
        name (None | str): The grant's name, if it was given one.
        metadata (GrantDetailResponseMetadataType0 | None): The grant's metadata, if any.
    """

    account_id: str
    grant_id: int
    sequence: int
    timestamp: int
    amount: int
    expiry: int
    settled_debt: int
    retained: int
    remaining: int
    resources: list[str] | None
    name: None | str
    metadata: GrantDetailResponseMetadataType0 | None
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.grant_detail_response_metadata_type_0 import GrantDetailResponseMetadataType0  # noqa: PLC0415

        account_id = self.account_id

        grant_id = self.grant_id

        sequence = self.sequence

        timestamp = self.timestamp

        amount = self.amount

        expiry = self.expiry

        settled_debt = self.settled_debt

        retained = self.retained

        remaining = self.remaining

        resources: list[str] | None
        if isinstance(self.resources, list):
            resources = self.resources

        else:
            resources = self.resources

        name: None | str
        name = self.name

        metadata: dict[str, Any] | None
        if isinstance(self.metadata, GrantDetailResponseMetadataType0):
            metadata = self.metadata.to_dict()
        else:
            metadata = self.metadata

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "account_id": account_id,
                "grant_id": grant_id,
                "sequence": sequence,
                "timestamp": timestamp,
                "amount": amount,
                "expiry": expiry,
                "settled_debt": settled_debt,
                "retained": retained,
                "remaining": remaining,
                "resources": resources,
                "name": name,
                "metadata": metadata,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.grant_detail_response_metadata_type_0 import GrantDetailResponseMetadataType0  # noqa: PLC0415

        d = dict(src_dict)
        account_id = d.pop("account_id")

        grant_id = d.pop("grant_id")

        sequence = d.pop("sequence")

        timestamp = d.pop("timestamp")

        amount = d.pop("amount")

        expiry = d.pop("expiry")

        settled_debt = d.pop("settled_debt")

        retained = d.pop("retained")

        remaining = d.pop("remaining")

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

        def _parse_metadata(data: object) -> GrantDetailResponseMetadataType0 | None:
            if data is None:
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                metadata_type_0 = GrantDetailResponseMetadataType0.from_dict(data)

                return metadata_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(GrantDetailResponseMetadataType0 | None, data)

        metadata = _parse_metadata(d.pop("metadata"))

        grant_detail_response = cls(
            account_id=account_id,
            grant_id=grant_id,
            sequence=sequence,
            timestamp=timestamp,
            amount=amount,
            expiry=expiry,
            settled_debt=settled_debt,
            retained=retained,
            remaining=remaining,
            resources=resources,
            name=name,
            metadata=metadata,
        )

        grant_detail_response.additional_properties = d
        return grant_detail_response

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
