from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="EventDuplicate")


@_attrs_define
class EventDuplicate:
    """A duplicate line: nothing changed. The first line's effect is ledger entry
    `sequence` of `account_id` (its current state: a late write may have restated it).

        Attributes:
            account_id (str):
            sequence (int):
            grant_id (int | None | Unset): The grant the first line made (grant) or voided (void).
    """

    account_id: str
    sequence: int
    grant_id: int | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        account_id = self.account_id

        sequence = self.sequence

        grant_id: int | None | Unset
        if isinstance(self.grant_id, Unset):
            grant_id = UNSET
        else:
            grant_id = self.grant_id

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "account_id": account_id,
                "sequence": sequence,
            }
        )
        if grant_id is not UNSET:
            field_dict["grant_id"] = grant_id

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        account_id = d.pop("account_id")

        sequence = d.pop("sequence")

        def _parse_grant_id(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        grant_id = _parse_grant_id(d.pop("grant_id", UNSET))

        event_duplicate = cls(
            account_id=account_id,
            sequence=sequence,
            grant_id=grant_id,
        )

        event_duplicate.additional_properties = d
        return event_duplicate

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
