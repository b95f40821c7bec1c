from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.balance_operation import BalanceOperation
    from ..models.consume_operation import ConsumeOperation
    from ..models.grant_operation import GrantOperation
    from ..models.void_operation import VoidOperation


T = TypeVar("T", bound="BatchRequest")


@_attrs_define
class BatchRequest:
    """
    Attributes:
        operations (list[BalanceOperation | ConsumeOperation | GrantOperation | VoidOperation]): Applied in the order
            given, 1 to 10,000.
        atomic (bool | Unset): true: all or nothing; on the first failure nothing is applied and the answer is a problem
            naming the operation. false: each operation succeeds or fails alone. Default: False.
    """

    operations: list[BalanceOperation | ConsumeOperation | GrantOperation | VoidOperation]
    atomic: bool | Unset = False

    def to_dict(self) -> dict[str, Any]:
        from ..models.consume_operation import ConsumeOperation  # noqa: PLC0415
        from ..models.grant_operation import GrantOperation  # noqa: PLC0415
        from ..models.void_operation import VoidOperation  # noqa: PLC0415

        operations = []
        for operations_item_data in self.operations:
            operations_item: dict[str, Any]
            if isinstance(operations_item_data, GrantOperation):
                operations_item = operations_item_data.to_dict()
            elif isinstance(operations_item_data, ConsumeOperation):
                operations_item = operations_item_data.to_dict()
            elif isinstance(operations_item_data, VoidOperation):
                operations_item = operations_item_data.to_dict()
            else:
                operations_item = operations_item_data.to_dict()

            operations.append(operations_item)

        atomic = self.atomic

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "operations": operations,
            }
        )
        if atomic is not UNSET:
            field_dict["atomic"] = atomic

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.balance_operation import BalanceOperation  # noqa: PLC0415
        from ..models.consume_operation import ConsumeOperation  # noqa: PLC0415
        from ..models.grant_operation import GrantOperation  # noqa: PLC0415
        from ..models.void_operation import VoidOperation  # noqa: PLC0415

        d = dict(src_dict)
        operations = []
        _operations = d.pop("operations")
        for operations_item_data in _operations:

            def _parse_operations_item(
                data: object,
            ) -> BalanceOperation | ConsumeOperation | GrantOperation | VoidOperation:
                try:
                    if not isinstance(data, dict):
                        raise TypeError()
                    operations_item_type_0 = GrantOperation.from_dict(data)

                    return operations_item_type_0
                except (TypeError, ValueError, AttributeError, KeyError):
                    pass
                try:
                    if not isinstance(data, dict):
                        raise TypeError()
                    operations_item_type_1 = ConsumeOperation.from_dict(data)

                    return operations_item_type_1
                except (TypeError, ValueError, AttributeError, KeyError):
                    pass
                try:
                    if not isinstance(data, dict):
                        raise TypeError()
                    operations_item_type_2 = VoidOperation.from_dict(data)

                    return operations_item_type_2
                except (TypeError, ValueError, AttributeError, KeyError):
                    pass
                if not isinstance(data, dict):
                    raise TypeError()
                operations_item_type_3 = BalanceOperation.from_dict(data)

                return operations_item_type_3

            operations_item = _parse_operations_item(operations_item_data)

            operations.append(operations_item)

        atomic = d.pop("atomic", UNSET)

        batch_request = cls(
            operations=operations,
            atomic=atomic,
        )

        return batch_request
