from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.balance_response import BalanceResponse


T = TypeVar("T", bound="AccountPage")


@_attrs_define
class AccountPage:
    """
    Attributes:
        accounts (list[BalanceResponse]): In byte order of `account_id`, each at its clock: what getBalance answers
            without `timestamp` (`timestamp` is the account's latest accepted write).
        next_after (None | str): Pass as `after` to get the next page; null when this is the last page.
    """

    accounts: list[BalanceResponse]
    next_after: None | str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        accounts = []
        for accounts_item_data in self.accounts:
            accounts_item = accounts_item_data.to_dict()
            accounts.append(accounts_item)

        next_after: None | str
        next_after = self.next_after

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "accounts": accounts,
                "next_after": next_after,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.balance_response import BalanceResponse  # noqa: PLC0415

        d = dict(src_dict)
        accounts = []
        _accounts = d.pop("accounts")
        for accounts_item_data in _accounts:
            accounts_item = BalanceResponse.from_dict(accounts_item_data)

            accounts.append(accounts_item)

        def _parse_next_after(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        next_after = _parse_next_after(d.pop("next_after"))

        account_page = cls(
            accounts=accounts,
            next_after=next_after,
        )

        account_page.additional_properties = d
        return account_page

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
