from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.consumption_entry import ConsumptionEntry
    from ..models.expiration_entry import ExpirationEntry
    from ..models.grant_entry import GrantEntry
    from ..models.void_entry import VoidEntry


T = TypeVar("T", bound="LedgerPage")


@_attrs_define
class LedgerPage:
    """
    Attributes:
        account_id (str):
        entries (list[ConsumptionEntry | ExpirationEntry | GrantEntry | VoidEntry]):
        next_after (int | None): Pass as `after` to get the next page; null when this is the last page.
    """

    account_id: str
    entries: list[ConsumptionEntry | ExpirationEntry | GrantEntry | VoidEntry]
    next_after: int | None
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.consumption_entry import ConsumptionEntry  # noqa: PLC0415
        from ..models.expiration_entry import ExpirationEntry  # noqa: PLC0415
        from ..models.grant_entry import GrantEntry  # noqa: PLC0415

        account_id = self.account_id

        entries = []
        for entries_item_data in self.entries:
            entries_item: dict[str, Any]
            if isinstance(entries_item_data, GrantEntry):
                entries_item = entries_item_data.to_dict()
            elif isinstance(entries_item_data, ConsumptionEntry):
                entries_item = entries_item_data.to_dict()
            elif isinstance(entries_item_data, ExpirationEntry):
                entries_item = entries_item_data.to_dict()
            else:
                entries_item = entries_item_data.to_dict()

            entries.append(entries_item)

        next_after: int | None
        next_after = self.next_after

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "account_id": account_id,
                "entries": entries,
                "next_after": next_after,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.consumption_entry import ConsumptionEntry  # noqa: PLC0415
        from ..models.expiration_entry import ExpirationEntry  # noqa: PLC0415
        from ..models.grant_entry import GrantEntry  # noqa: PLC0415
        from ..models.void_entry import VoidEntry  # noqa: PLC0415

        d = dict(src_dict)
        account_id = d.pop("account_id")

        entries = []
        _entries = d.pop("entries")
        for entries_item_data in _entries:

            def _parse_entries_item(data: object) -> ConsumptionEntry | ExpirationEntry | GrantEntry | VoidEntry:
                try:
                    if not isinstance(data, dict):
                        raise TypeError()
                    entries_item_type_0 = GrantEntry.from_dict(data)

                    return entries_item_type_0
                except (TypeError, ValueError, AttributeError, KeyError):
                    pass
                try:
                    if not isinstance(data, dict):
                        raise TypeError()
                    entries_item_type_1 = ConsumptionEntry.from_dict(data)

                    return entries_item_type_1
                except (TypeError, ValueError, AttributeError, KeyError):
                    pass
                try:
                    if not isinstance(data, dict):
                        raise TypeError()
                    entries_item_type_2 = ExpirationEntry.from_dict(data)

                    return entries_item_type_2
                except (TypeError, ValueError, AttributeError, KeyError):
                    pass
                if not isinstance(data, dict):
                    raise TypeError()
                entries_item_type_3 = VoidEntry.from_dict(data)

                return entries_item_type_3

            entries_item = _parse_entries_item(entries_item_data)

            entries.append(entries_item)

        def _parse_next_after(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        next_after = _parse_next_after(d.pop("next_after"))

        ledger_page = cls(
            account_id=account_id,
            entries=entries,
            next_after=next_after,
        )

        ledger_page.additional_properties = d
        return ledger_page

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
