from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.grant_request_metadata_type_0 import GrantRequestMetadataType0


T = TypeVar("T", bound="GrantRequest")


@_attrs_define
class GrantRequest:
    """
    Attributes:
        amount (int): Credits, 1 to 2^53-1.
        timestamp (int): Caller's time, 0 to 2^53-1; never decreases per account.
        expiry (int): First time at which the credits are no longer usable (exclusive end).
        resources (list[str] | None | Unset):
        name (None | str | Unset):
        metadata (GrantRequestMetadataType0 | None | Unset):
    """

    amount: int
    timestamp: int
    expiry: int
    resources: list[str] | None | Unset = UNSET
    name: None | str | Unset = UNSET
    metadata: GrantRequestMetadataType0 | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        from ..models.grant_request_metadata_type_0 import GrantRequestMetadataType0  # noqa: PLC0415

        amount = self.amount

        timestamp = self.timestamp

        expiry = self.expiry

        resources: list[str] | None | Unset
        if isinstance(self.resources, Unset):
            resources = UNSET
        elif isinstance(self.resources, list):
            resources = self.resources

        else:
            resources = self.resources

        name: None | str | Unset
        if isinstance(self.name, Unset):
            name = UNSET
        else:
            name = self.name

        metadata: dict[str, Any] | None | Unset
        if isinstance(self.metadata, Unset):
            metadata = UNSET
        elif isinstance(self.metadata, GrantRequestMetadataType0):
            metadata = self.metadata.to_dict()
        else:
            metadata = self.metadata

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "amount": amount,
                "timestamp": timestamp,
                "expiry": expiry,
            }
        )
        if resources is not UNSET:
            field_dict["resources"] = resources
        if name is not UNSET:
            field_dict["name"] = name
        if metadata is not UNSET:
            field_dict["metadata"] = metadata

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.grant_request_metadata_type_0 import GrantRequestMetadataType0  # noqa: PLC0415

        d = dict(src_dict)
        amount = d.pop("amount")

        timestamp = d.pop("timestamp")

        expiry = d.pop("expiry")

        def _parse_resources(data: object) -> list[str] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                resources_type_0 = cast(list[str], data)

                return resources_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[str] | None | Unset, data)

        resources = _parse_resources(d.pop("resources", UNSET))

        def _parse_name(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        name = _parse_name(d.pop("name", UNSET))

        def _parse_metadata(data: object) -> GrantRequestMetadataType0 | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                metadata_type_0 = GrantRequestMetadataType0.from_dict(data)

                return metadata_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(GrantRequestMetadataType0 | None | Unset, data)

        metadata = _parse_metadata(d.pop("metadata", UNSET))

        grant_request = cls(
            amount=amount,
            timestamp=timestamp,
            expiry=expiry,
            resources=resources,
            name=name,
            metadata=metadata,
        )

        return grant_request
