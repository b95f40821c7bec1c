from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="ForecastGrant")


@_attrs_define
class ForecastGrant:
    """
    Attributes:
        grant_id (int):
        expiry (int): When what is left of it expires (unusable from then).
        remaining (int): Its credits left at the account's clock.
        consumed (int): What the burn draws from it.
        expiring_unused (int): What is left of it at `expiry`, expiring unused (`remaining - consumed`).
        used_up_at (int | None): The burn step that draws its last credit; null when some of it expires.
        resources (list[str] | None): The grant's GPU classes, sorted; null: unrestricted.
    """

    grant_id: int
    expiry: int
    remaining: int
    consumed: int
    expiring_unused: int
    used_up_at: int | None
    resources: list[str] | None
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        grant_id = self.grant_id

        expiry = self.expiry

        remaining = self.remaining

        consumed = self.consumed

        expiring_unused = self.expiring_unused

        used_up_at: int | None
        used_up_at = self.used_up_at

        resources: list[str] | None
        if isinstance(self.resources, list):
            resources = self.resources

        else:
            resources = self.resources

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "grant_id": grant_id,
                "expiry": expiry,
                "remaining": remaining,
                "consumed": consumed,
                "expiring_unused": expiring_unused,
                "used_up_at": used_up_at,
                "resources": resources,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        grant_id = d.pop("grant_id")

        expiry = d.pop("expiry")

        remaining = d.pop("remaining")

        consumed = d.pop("consumed")

        expiring_unused = d.pop("expiring_unused")

        def _parse_used_up_at(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        used_up_at = _parse_used_up_at(d.pop("used_up_at"))

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

        forecast_grant = cls(
            grant_id=grant_id,
            expiry=expiry,
            remaining=remaining,
            consumed=consumed,
            expiring_unused=expiring_unused,
            used_up_at=used_up_at,
            resources=resources,
        )

        forecast_grant.additional_properties = d
        return forecast_grant

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
