from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define

T = TypeVar("T", bound="VoidRequest")


@_attrs_define
class VoidRequest:
    """
    Attributes:
        timestamp (int): When the void takes effect: not before the grant's own timestamp (422), and a write like any
            other for the account's clock.
    """

    timestamp: int

    def to_dict(self) -> dict[str, Any]:
        timestamp = self.timestamp

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "timestamp": timestamp,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        timestamp = d.pop("timestamp")

        void_request = cls(
            timestamp=timestamp,
        )

        return void_request
