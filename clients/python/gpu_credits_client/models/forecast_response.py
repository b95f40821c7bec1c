from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.forecast_grant import ForecastGrant


T = TypeVar("T", bound="ForecastResponse")


@_attrs_define
class ForecastResponse:
    """
    Attributes:
        account_id (str):
        timestamp (int): The account's clock: the burn's first step.
        burn_rate (int): Credits consumed per timestamp unit.
        resource (None | str): The GPU class burnt (`?resource=`); null: no class (unrestricted grants pay).
        available (int): The live credits the burn can draw at the clock: unrestricted ones, and with `resource` those
            listing it (the sum of `grants[].remaining`).
        debt (int): Outstanding debt now, of `resource` or in total, as getBalance answers it. The burn does not settle
            it (only grants do), and adds to it from `run_out_at` on.
        run_out_at (int): The first step the live credits cannot cover in full: from then on the burn becomes debt.
            Every earlier step is covered, so `consumed = burn_rate * (run_out_at - timestamp)` plus what the step at
            `run_out_at` drew (less than `burn_rate`). The clock itself when there is nothing to draw.
        consumed (int): What the burn draws before it runs out.
        expiring_unused (int): What expires unused (`available - consumed`): the sum over `grants`.
        grants (list[ForecastGrant]): The grants the burn can draw, in the order it draws them.
    """

    account_id: str
    timestamp: int
    burn_rate: int
    resource: None | str
    available: int
    debt: int
    run_out_at: int
    consumed: int
    expiring_unused: int
    grants: list[ForecastGrant]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        account_id = self.account_id

        timestamp = self.timestamp

        burn_rate = self.burn_rate

        resource: None | str
        resource = self.resource

        available = self.available

        debt = self.debt

        run_out_at = self.run_out_at

        consumed = self.consumed

        expiring_unused = self.expiring_unused

        grants = []
        for grants_item_data in self.grants:
            grants_item = grants_item_data.to_dict()
            grants.append(grants_item)

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "account_id": account_id,
                "timestamp": timestamp,
                "burn_rate": burn_rate,
                "resource": resource,
                "available": available,
                "debt": debt,
                "run_out_at": run_out_at,
                "consumed": consumed,
                "expiring_unused": expiring_unused,
                "grants": grants,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.forecast_grant import ForecastGrant  # noqa: PLC0415

        d = dict(src_dict)
        account_id = d.pop("account_id")

        timestamp = d.pop("timestamp")

        burn_rate = d.pop("burn_rate")

        def _parse_resource(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        resource = _parse_resource(d.pop("resource"))

        available = d.pop("available")

        debt = d.pop("debt")

        run_out_at = d.pop("run_out_at")

        consumed = d.pop("consumed")

        expiring_unused = d.pop("expiring_unused")

        grants = []
        _grants = d.pop("grants")
        for grants_item_data in _grants:
            grants_item = ForecastGrant.from_dict(grants_item_data)

            grants.append(grants_item)

        forecast_response = cls(
            account_id=account_id,
            timestamp=timestamp,
            burn_rate=burn_rate,
            resource=resource,
            available=available,
            debt=debt,
            run_out_at=run_out_at,
            consumed=consumed,
            expiring_unused=expiring_unused,
            grants=grants,
        )

        forecast_response.additional_properties = d
        return forecast_response

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
