from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.grant_event_metadata_type_0 import GrantEventMetadataType0


T = TypeVar("T", bound="GrantEvent")


@_attrs_define
class GrantEvent:
    """
    Attributes:
        op (Literal['grant']):
        account_id (str):
        amount (int): Credits, 1 to 2^53-1.
        timestamp (int): Caller's time, 0 to 2^53-1; never decreases per account.
        expiry (int): First time at which the credits are no longer usable (exclusive end).
        id (str): The client's id for this line: 1 to 128 printable ASCII characters, not starting with a space; unique
            per account. A line whose id the account already applied answers `duplicate` and changes nothing.
        resources (list[str] | None | Unset):
        name (None | str | Unset):
        metadata (GrantEventMetadataType0 | None | Unset):
    """

    op: Literal["grant"]
    account_id: str
    amount: int
    timestamp: int
    expiry: int
    id: str
    resources: list[str] | None | Unset = UNSET
    name: None | str | Unset = UNSET
    metadata: GrantEventMetadataType0 | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        from ..models.grant_event_metadata_type_0 import GrantEventMetadataType0  # noqa: PLC0415

        op = self.op

        account_id = self.account_id

        amount = self.amount

        timestamp = self.timestamp

        expiry = self.expiry

        id = self.id

        resources: list[str] | None | Unset
        if isinstance(self.resources, Unset):
            resources = UNSET
        elif isinstance(self.resources, list):
            resources = self.resources

        else:
            resources = self.resources

        name: None | str | Unset
        if isinstance(self.name, Unset):
            name = UNSET
        else:
            name = self.name

        metadata: dict[str, Any] | None | Unset
        if isinstance(self.metadata, Unset):
            metadata = UNSET
        elif isinstance(self.metadata, GrantEventMetadataType0):
            metadata = self.metadata.to_dict()
        else:
            metadata = self.metadata

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "op": op,
                "account_id": account_id,
                "amount": amount,
                "timestamp": timestamp,
                "expiry": expiry,
                "id": id,
            }
        )
        if resources is not UNSET:
            field_dict["resources"] = resources
        if name is not UNSET:
            field_dict["name"] = name
        if metadata is not UNSET:
            field_dict["metadata"] = metadata

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.grant_event_metadata_type_0 import GrantEventMetadataType0  # noqa: PLC0415

        d = dict(src_dict)
        op = cast(Literal["grant"], d.pop("op"))
        if op != "grant":
            raise ValueError(f"op must match const 'grant', got '{op}'")

        account_id = d.pop("account_id")

        amount = d.pop("amount")

        timestamp = d.pop("timestamp")

        expiry = d.pop("expiry")

        id = d.pop("id")

        def _parse_resources(data: object) -> list[str] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                resources_type_0 = cast(list[str], data)

                return resources_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[str] | None | Unset, data)

        resources = _parse_resources(d.pop("resources", UNSET))

        def _parse_name(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        name = _parse_name(d.pop("name", UNSET))

        def _parse_metadata(data: object) -> GrantEventMetadataType0 | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                metadata_type_0 = GrantEventMetadataType0.from_dict(data)

                return metadata_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(GrantEventMetadataType0 | None | Unset, data)

        metadata = _parse_metadata(d.pop("metadata", UNSET))

        grant_event = cls(
            op=op,
            account_id=account_id,
            amount=amount,
            timestamp=timestamp,
            expiry=expiry,
            id=id,
            resources=resources,
            name=name,
            metadata=metadata,
        )

        return grant_event
