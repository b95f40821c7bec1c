from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.consume_response import ConsumeResponse
    from ..models.event_duplicate import EventDuplicate
    from ..models.grant_response import GrantResponse
    from ..models.problem import Problem
    from ..models.void_response import VoidResponse


T = TypeVar("T", bound="EventResultLine")


@_attrs_define
class EventResultLine:
    """One line of the answer to POST /v1/events, per request line that is not blank, in
    order, written once the line's chunk is committed.

        Attributes:
            line (int): The request line it answers, 1-based (blank lines too).
            id (None | str): The line's `id`; null when the line has none to read.
            status (int): The status the single endpoint would have answered (201 grant, 200 consume or void, 200
                duplicate), or the line's error status.
            body (ConsumeResponse | EventDuplicate | GrantResponse | Problem | VoidResponse): What the single endpoint would
                have answered; for a duplicate, where the first line's effect is; for an error, a problem document.
            duplicate (bool | None | Unset): Present and true when the account had already applied this id.
    """

    line: int
    id: None | str
    status: int
    body: ConsumeResponse | EventDuplicate | GrantResponse | Problem | VoidResponse
    duplicate: bool | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.consume_response import ConsumeResponse  # noqa: PLC0415
        from ..models.event_duplicate import EventDuplicate  # noqa: PLC0415
        from ..models.grant_response import GrantResponse  # noqa: PLC0415
        from ..models.void_response import VoidResponse  # noqa: PLC0415

        line = self.line

        id: None | str
        id = self.id

        status = self.status

        body: dict[str, Any]
        if isinstance(self.body, GrantResponse):
            body = self.body.to_dict()
        elif isinstance(self.body, ConsumeResponse):
            body = self.body.to_dict()
        elif isinstance(self.body, VoidResponse):
            body = self.body.to_dict()
        elif isinstance(self.body, EventDuplicate):
            body = self.body.to_dict()
        else:
            body = self.body.to_dict()

        duplicate: bool | None | Unset
        if isinstance(self.duplicate, Unset):
            duplicate = UNSET
        else:
            duplicate = self.duplicate

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "line": line,
                "id": id,
                "status": status,
                "body": body,
            }
        )
        if duplicate is not UNSET:
            field_dict["duplicate"] = duplicate

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.consume_response import ConsumeResponse  # noqa: PLC0415
        from ..models.event_duplicate import EventDuplicate  # noqa: PLC0415
        from ..models.grant_response import GrantResponse  # noqa: PLC0415
        from ..models.problem import Problem  # noqa: PLC0415
        from ..models.void_response import VoidResponse  # noqa: PLC0415

        d = dict(src_dict)
        line = d.pop("line")

        def _parse_id(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        id = _parse_id(d.pop("id"))

        status = d.pop("status")

        def _parse_body(data: object) -> ConsumeResponse | EventDuplicate | GrantResponse | Problem | VoidResponse:
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                body_type_0 = GrantResponse.from_dict(data)

                return body_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                body_type_1 = ConsumeResponse.from_dict(data)

                return body_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                body_type_2 = VoidResponse.from_dict(data)

                return body_type_2
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                body_type_3 = EventDuplicate.from_dict(data)

                return body_type_3
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            if not isinstance(data, dict):
                raise TypeError()
            body_type_4 = Problem.from_dict(data)

            return body_type_4

        body = _parse_body(d.pop("body"))

        def _parse_duplicate(data: object) -> bool | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(bool | None | Unset, data)

        duplicate = _parse_duplicate(d.pop("duplicate", UNSET))

        event_result_line = cls(
            line=line,
            id=id,
            status=status,
            body=body,
            duplicate=duplicate,
        )

        event_result_line.additional_properties = d
        return event_result_line

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
