from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="BalanceOperation")


@_attrs_define
class BalanceOperation:
    """
    Attributes:
        op (Literal['balance']):
        account_id (str):
        timestamp (int | None | Unset): As the `timestamp` query parameter of getBalance.
        resource (None | str | Unset): As the `resource` query parameter of getBalance.
    """

    op: Literal["balance"]
    account_id: str
    timestamp: int | None | Unset = UNSET
    resource: None | str | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        op = self.op

        account_id = self.account_id

        timestamp: int | None | Unset
        if isinstance(self.timestamp, Unset):
            timestamp = UNSET
        else:
            timestamp = self.timestamp

        resource: None | str | Unset
        if isinstance(self.resource, Unset):
            resource = UNSET
        else:
            resource = self.resource

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "op": op,
                "account_id": account_id,
            }
        )
        if timestamp is not UNSET:
            field_dict["timestamp"] = timestamp
        if resource is not UNSET:
            field_dict["resource"] = resource

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        op = cast(Literal["balance"], d.pop("op"))
        if op != "balance":
            raise ValueError(f"op must match const 'balance', got '{op}'")

        account_id = d.pop("account_id")

        def _parse_timestamp(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        timestamp = _parse_timestamp(d.pop("timestamp", UNSET))

        def _parse_resource(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        resource = _parse_resource(d.pop("resource", UNSET))

        balance_operation = cls(
            op=op,
            account_id=account_id,
            timestamp=timestamp,
            resource=resource,
        )

        return balance_operation
