from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="AllocationItem")


@_attrs_define
class AllocationItem:
    """
    Attributes:
        grant_id (int):
        expiry (int):
        amount (int): Credits taken from this grant.
        resources (list[str] | None): The grant's GPU classes, sorted; null: unrestricted.
    """

    grant_id: int
    expiry: int
    amount: int
    resources: list[str] | None
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
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

        allocation_item = cls(
            grant_id=grant_id,
            expiry=expiry,
            amount=amount,
            resources=resources,
        )

        allocation_item.additional_properties = d
        return allocation_item

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
