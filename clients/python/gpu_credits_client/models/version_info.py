from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.version_info_storage import VersionInfoStorage

T = TypeVar("T", bound="VersionInfo")


@_attrs_define
class VersionInfo:
    """
    Attributes:
        version (str): The gpu-credits release (the installed package).
        storage (VersionInfoStorage): The backend in use.
        schema_version (int | None): The storage's schema version when this process started, after applying its
            migrations; null for memory, which has no schema.
    """

    version: str
    storage: VersionInfoStorage
    schema_version: int | None
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        version = self.version

        storage = self.storage.value

        schema_version: int | None
        schema_version = self.schema_version

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "version": version,
                "storage": storage,
                "schema_version": schema_version,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        version = d.pop("version")

        storage = VersionInfoStorage(d.pop("storage"))

        def _parse_schema_version(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        schema_version = _parse_schema_version(d.pop("schema_version"))

        version_info = cls(
            version=version,
            storage=storage,
            schema_version=schema_version,
        )

        version_info.additional_properties = d
        return version_info

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
