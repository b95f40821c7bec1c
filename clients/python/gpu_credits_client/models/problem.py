from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.problem_operation_problem_type_0 import ProblemOperationProblemType0
    from ..models.validation_issue import ValidationIssue


T = TypeVar("T", bound="Problem")


@_attrs_define
class Problem:
    """An RFC 9457 problem document.

    Attributes:
        type_ (str): URI reference identifying the problem type.
        title (str):
        status (int):
        detail (str):
        instance (None | str | Unset):
        request_id (None | str | Unset): The request's id: the `X-Request-ID` it was sent with (1 to 128 visible ASCII
            characters) or one the service made, as in the answer's `X-Request-ID` header and the request's log line. On
            every problem document answered to a request; absent only on the few the HTTP layer writes before a request is
            complete (400 malformed HTTP, 408 headers too slow, 414, 431, 429, 503 at the connection limit), and inside
            batch results.
        errors (list[ValidationIssue] | None | Unset): For validation problems: each offending field, in the order
            found; at most the first 100 (then `errors_total` says how many there were).
        errors_total (int | None | Unset): For validation problems with more than 100 offending fields: how many;
            `errors` lists the first 100.
        account_timestamp (int | None | Unset): For a timestamp regression: the account's latest timestamp.
        watermark (int | None | Unset): For a timestamp regression: the account's watermark; a write must have a
            timestamp at or after it (SPEC section 6).
        limit (int | None | Unset): For a limit reached: the limit.
        voided_at (int | None | Unset): For a grant already voided: when it was voided.
        quota (None | str | Unset): For a quota reached: which one (`accounts`, `live grants`, `idempotency keys`).
        tenant (None | str | Unset): For a quota reached: the account-id prefix whose quota it is (absent: the service's
            own bound).
        sequence (int | None | Unset): For an event id already applied to another line: the entry it made.
        operation_index (int | None | Unset): For an aborted atomic batch: the 0-based index of the failed operation.
        operation_problem (None | ProblemOperationProblemType0 | Unset): For an aborted atomic batch: the failed
            operation's problem document.
    """

    type_: str
    title: str
    status: int
    detail: str
    instance: None | str | Unset = UNSET
    request_id: None | str | Unset = UNSET
    errors: list[ValidationIssue] | None | Unset = UNSET
    errors_total: int | None | Unset = UNSET
    account_timestamp: int | None | Unset = UNSET
    watermark: int | None | Unset = UNSET
    limit: int | None | Unset = UNSET
    voided_at: int | None | Unset = UNSET
    quota: None | str | Unset = UNSET
    tenant: None | str | Unset = UNSET
    sequence: int | None | Unset = UNSET
    operation_index: int | None | Unset = UNSET
    operation_problem: None | ProblemOperationProblemType0 | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.problem_operation_problem_type_0 import ProblemOperationProblemType0  # noqa: PLC0415

        type_ = self.type_

        title = self.title

        status = self.status

        detail = self.detail

        instance: None | str | Unset
        if isinstance(self.instance, Unset):
            instance = UNSET
        else:
            instance = self.instance

        request_id: None | str | Unset
        if isinstance(self.request_id, Unset):
            request_id = UNSET
        else:
            request_id = self.request_id

        errors: list[dict[str, Any]] | None | Unset
        if isinstance(self.errors, Unset):
            errors = UNSET
        elif isinstance(self.errors, list):
            errors = []
            for errors_type_0_item_data in self.errors:
                errors_type_0_item = errors_type_0_item_data.to_dict()
                errors.append(errors_type_0_item)

        else:
            errors = self.errors

        errors_total: int | None | Unset
        if isinstance(self.errors_total, Unset):
            errors_total = UNSET
        else:
            errors_total = self.errors_total

        account_timestamp: int | None | Unset
        if isinstance(self.account_timestamp, Unset):
            account_timestamp = UNSET
        else:
            account_timestamp = self.account_timestamp

        watermark: int | None | Unset
        if isinstance(self.watermark, Unset):
            watermark = UNSET
        else:
            watermark = self.watermark

        limit: int | None | Unset
        if isinstance(self.limit, Unset):
            limit = UNSET
        else:
            limit = self.limit

        voided_at: int | None | Unset
        if isinstance(self.voided_at, Unset):
            voided_at = UNSET
        else:
            voided_at = self.voided_at

        quota: None | str | Unset
        if isinstance(self.quota, Unset):
            quota = UNSET
        else:
            quota = self.quota

        tenant: None | str | Unset
        if isinstance(self.tenant, Unset):
            tenant = UNSET
        else:
            tenant = self.tenant

        sequence: int | None | Unset
        if isinstance(self.sequence, Unset):
            sequence = UNSET
        else:
            sequence = self.sequence

        operation_index: int | None | Unset
        if isinstance(self.operation_index, Unset):
            operation_index = UNSET
        else:
            operation_index = self.operation_index

        operation_problem: dict[str, Any] | None | Unset
        if isinstance(self.operation_problem, Unset):
            operation_problem = UNSET
        elif isinstance(self.operation_problem, ProblemOperationProblemType0):
            operation_problem = self.operation_problem.to_dict()
        else:
            operation_problem = self.operation_problem

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "type": type_,
                "title": title,
                "status": status,
                "detail": detail,
            }
        )
        if instance is not UNSET:
            field_dict["instance"] = instance
        if request_id is not UNSET:
            field_dict["request_id"] = request_id
        if errors is not UNSET:
            field_dict["errors"] = errors
        if errors_total is not UNSET:
            field_dict["errors_total"] = errors_total
        if account_timestamp is not UNSET:
            field_dict["account_timestamp"] = account_timestamp
        if watermark is not UNSET:
            field_dict["watermark"] = watermark
        if limit is not UNSET:
            field_dict["limit"] = limit
        if voided_at is not UNSET:
            field_dict["voided_at"] = voided_at
        if quota is not UNSET:
            field_dict["quota"] = quota
        if tenant is not UNSET:
            field_dict["tenant"] = tenant
        if sequence is not UNSET:
            field_dict["sequence"] = sequence
        if operation_index is not UNSET:
            field_dict["operation_index"] = operation_index
        if operation_problem is not UNSET:
            field_dict["operation_problem"] = operation_problem

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.problem_operation_problem_type_0 import ProblemOperationProblemType0  # noqa: PLC0415
        from ..models.validation_issue import ValidationIssue  # noqa: PLC0415

        d = dict(src_dict)
        type_ = d.pop("type")

        title = d.pop("title")

        status = d.pop("status")

        detail = d.pop("detail")

        def _parse_instance(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        instance = _parse_instance(d.pop("instance", UNSET))

        def _parse_request_id(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        request_id = _parse_request_id(d.pop("request_id", UNSET))

        def _parse_errors(data: object) -> list[ValidationIssue] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                errors_type_0 = []
                _errors_type_0 = data
                for errors_type_0_item_data in _errors_type_0:
                    errors_type_0_item = ValidationIssue.from_dict(errors_type_0_item_data)

                    errors_type_0.append(errors_type_0_item)

                return errors_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[ValidationIssue] | None | Unset, data)

        errors = _parse_errors(d.pop("errors", UNSET))

        def _parse_errors_total(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        errors_total = _parse_errors_total(d.pop("errors_total", UNSET))

        def _parse_account_timestamp(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        account_timestamp = _parse_account_timestamp(d.pop("account_timestamp", UNSET))

        def _parse_watermark(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        watermark = _parse_watermark(d.pop("watermark", UNSET))

        def _parse_limit(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        limit = _parse_limit(d.pop("limit", UNSET))

        def _parse_voided_at(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        voided_at = _parse_voided_at(d.pop("voided_at", UNSET))

        def _parse_quota(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        quota = _parse_quota(d.pop("quota", UNSET))

        def _parse_tenant(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        tenant = _parse_tenant(d.pop("tenant", UNSET))

        def _parse_sequence(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        sequence = _parse_sequence(d.pop("sequence", UNSET))

        def _parse_operation_index(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        operation_index = _parse_operation_index(d.pop("operation_index", UNSET))

        def _parse_operation_problem(data: object) -> None | ProblemOperationProblemType0 | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                operation_problem_type_0 = ProblemOperationProblemType0.from_dict(data)

                return operation_problem_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | ProblemOperationProblemType0 | Unset, data)

        operation_problem = _parse_operation_problem(d.pop("operation_problem", UNSET))

        problem = cls(
            type_=type_,
            title=title,
            status=status,
            detail=detail,
            instance=instance,
            request_id=request_id,
            errors=errors,
            errors_total=errors_total,
            account_timestamp=account_timestamp,
            watermark=watermark,
            limit=limit,
            voided_at=voided_at,
            quota=quota,
            tenant=tenant,
            sequence=sequence,
            operation_index=operation_index,
            operation_problem=operation_problem,
        )

        problem.additional_properties = d
        return problem

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
