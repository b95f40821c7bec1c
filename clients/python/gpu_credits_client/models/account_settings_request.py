from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define

T = TypeVar("T", bound="AccountSettingsRequest")


@_attrs_define
class AccountSettingsRequest:
    """
    Attributes:
        lateness_window (int | None): How far behind its clock the account accepts writes, in timestamp units; null: the
            service's setting (GPU_CREDITS_LATENESS_WINDOW). Lowering it makes writes final at once (the watermark moves
            forward); raising it never moves the watermark back.
    """

    lateness_window: int | None

    def to_dict(self) -> dict[str, Any]:
        lateness_window: int | None
        lateness_window = self.lateness_window

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "lateness_window": lateness_window,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)

        def _parse_lateness_window(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        lateness_window = _parse_lateness_window(d.pop("lateness_window"))

        account_settings_request = cls(
            lateness_window=lateness_window,
        )

        return account_settings_request
