from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="AccountSettingsResponse")


@_attrs_define
class AccountSettingsResponse:
    """
    Attributes:
        account_id (str):
        lateness_window (int): The window in force.
        inherited (bool): True: the service's setting; false: the account's own.
        clock (int):
        watermark (int):
    """

    account_id: str
    lateness_window: int
    inherited: bool
    clock: int
    watermark: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        account_id = self.account_id

        lateness_window = self.lateness_window

        inherited = self.inherited

        clock = self.clock

        watermark = self.watermark

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "account_id": account_id,
                "lateness_window": lateness_window,
                "inherited": inherited,
                "clock": clock,
                "watermark": watermark,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        account_id = d.pop("account_id")

        lateness_window = d.pop("lateness_window")

        inherited = d.pop("inherited")

        clock = d.pop("clock")

        watermark = d.pop("watermark")

        account_settings_response = cls(
            account_id=account_id,
            lateness_window=lateness_window,
            inherited=inherited,
            clock=clock,
            watermark=watermark,
        )

        account_settings_response.additional_properties = d
        return account_settings_response

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
