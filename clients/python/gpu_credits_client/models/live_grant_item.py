from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.live_grant_item_metadata_type_0 import LiveGrantItemMetadataType0


T = TypeVar("T", bound="LiveGrantItem")


@_attrs_define
class LiveGrantItem:
    """
    Attributes:
        grant_id (int):
        expiry (int):
        remaining (int):
        resources (list[str] | None): The grant's GPU classes, sorted; null: unrestricted.
        name (None | str): The grant's name, if it was given one.
        metadata (LiveGrantItemMetadataType0 | None): The grant's metadata, if any.
    """

    grant_id: int
    expiry: int
    remaining: int
    resources: list[str] | None
    name: None | str
    metadata: LiveGrantItemMetadataType0 | None
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.live_grant_item_metadata_type_0 import LiveGrantItemMetadataType0  # noqa: PLC0415

        grant_id = self.grant_id

        expiry = self.expiry

        remaining = self.remaining

        resources: list[str] | None
        if isinstance(self.resources, list):
            resources = self.resources

        else:
            resources = self.resources

        name: None | str
        name = self.name

        metadata: dict[str, Any] | None
        if isinstance(self.metadata, LiveGrantItemMetadataType0):
            metadata = self.metadata.to_dict()
        else:
            metadata = self.metadata

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "grant_id": grant_id,
                "expiry": expiry,
                "remaining": remaining,
                "resources": resources,
                "name": name,
                "metadata": metadata,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.live_grant_item_metadata_type_0 import LiveGrantItemMetadataType0  # noqa: PLC0415

        d = dict(src_dict)
        grant_id = d.pop("grant_id")

        expiry = d.pop("expiry")

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

        def _parse_metadata(data: object) -> LiveGrantItemMetadataType0 | None:
            if data is None:
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                metadata_type_0 = LiveGrantItemMetadataType0.from_dict(data)

                return metadata_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(LiveGrantItemMetadataType0 | None, data)

        metadata = _parse_metadata(d.pop("metadata"))

        live_grant_item = cls(
            grant_id=grant_id,
            expiry=expiry,
            remaining=remaining,
            resources=resources,
            name=name,
            metadata=metadata,
        )

        live_grant_item.additional_properties = d
        return live_grant_item

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
