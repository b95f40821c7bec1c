from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.batch_result_op import BatchResultOp

if TYPE_CHECKING:
    from ..models.balance_response import BalanceResponse
    from ..models.consume_response import ConsumeResponse
    from ..models.grant_response import GrantResponse
    from ..models.problem import Problem
    from ..models.void_response import VoidResponse


T = TypeVar("T", bound="BatchResult")


@_attrs_define
class BatchResult:
    """
    Attributes:
        op (BatchResultOp):
        status (int): The status the single endpoint would have answered.
        body (BalanceResponse | ConsumeResponse | GrantResponse | Problem | VoidResponse): The body the single endpoint
            would have answered.
    """

    op: BatchResultOp
    status: int
    body: BalanceResponse | ConsumeResponse | GrantResponse | Problem | VoidResponse
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.balance_response import BalanceResponse  # noqa: PLC0415
        from ..models.consume_response import ConsumeResponse  # noqa: PLC0415
        from ..models.grant_response import GrantResponse  # noqa: PLC0415
        from ..models.void_response import VoidResponse  # noqa: PLC0415

        op = self.op.value

        status = self.status

        body: dict[str, Any]
        if isinstance(self.body, GrantResponse):
            body = self.body.to_dict()
        elif isinstance(self.body, ConsumeResponse):
            body = self.body.to_dict()
        elif isinstance(self.body, VoidResponse):
            body = self.body.to_dict()
        elif isinstance(self.body, BalanceResponse):
            body = self.body.to_dict()
        else:
            body = self.body.to_dict()

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "op": op,
                "status": status,
                "body": body,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.balance_response import BalanceResponse  # noqa: PLC0415
        from ..models.consume_response import ConsumeResponse  # noqa: PLC0415
        from ..models.grant_response import GrantResponse  # noqa: PLC0415
        from ..models.problem import Problem  # noqa: PLC0415
        from ..models.void_response import VoidResponse  # noqa: PLC0415

        d = dict(src_dict)
        op = BatchResultOp(d.pop("op"))

        status = d.pop("status")

        def _parse_body(data: object) -> BalanceResponse | ConsumeResponse | GrantResponse | Problem | VoidResponse:
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
                body_type_3 = BalanceResponse.from_dict(data)

                return body_type_3
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            if not isinstance(data, dict):
                raise TypeError()
            body_type_4 = Problem.from_dict(data)

            return body_type_4

        body = _parse_body(d.pop("body"))

        batch_result = cls(
            op=op,
            status=status,
            body=body,
        )

        batch_result.additional_properties = d
        return batch_result

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
