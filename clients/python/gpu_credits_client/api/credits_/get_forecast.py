from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.forecast_response import ForecastResponse
from ...models.problem import Problem
from ...types import UNSET, Response, Unset


def _get_kwargs(
    account_id: str,
    *,
    burn_rate: int,
    resource: None | str | Unset = UNSET,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    params["burn_rate"] = burn_rate

    json_resource: None | str | Unset
    if isinstance(resource, Unset):
        json_resource = UNSET
    else:
        json_resource = resource
    params["resource"] = json_resource

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/accounts/{account_id}/forecast".format(
            account_id=quote(str(account_id), safe=""),
        ),
        "params": params,
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> ForecastResponse | Problem | None:
    if response.status_code == 200:
        response_200 = ForecastResponse.from_dict(response.json())

        return response_200

    if response.status_code == 400:
        response_400 = Problem.from_dict(response.json())

        return response_400

    if response.status_code == 401:
        response_401 = Problem.from_dict(response.json())

        return response_401

    if response.status_code == 403:
        response_403 = Problem.from_dict(response.json())

        return response_403

    if response.status_code == 404:
        response_404 = Problem.from_dict(response.json())

        return response_404

    if response.status_code == 408:
        response_408 = Problem.from_dict(response.json())

        return response_408

    if response.status_code == 413:
        response_413 = Problem.from_dict(response.json())

        return response_413

    if response.status_code == 414:
        response_414 = Problem.from_dict(response.json())

        return response_414

    if response.status_code == 422:
        response_422 = Problem.from_dict(response.json())

        return response_422

    if response.status_code == 431:
        response_431 = Problem.from_dict(response.json())

        return response_431

    if response.status_code == 503:
        response_503 = Problem.from_dict(response.json())

        return response_503

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Response[ForecastResponse | Problem]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    account_id: str,
    *,
    client: AuthenticatedClient,
    burn_rate: int,
    resource: None | str | Unset = UNSET,
) -> Response[ForecastResponse | Problem]:
    """Forecast a constant burn: when credits run out, what expires unused

     If the account consumed `burn_rate` credits (of class `resource`) at every integer
    time from its clock on, and nothing else happened: when the credits it can draw run out
    (`run_out_at`, the first step not covered in full) and, grant by grant in the order they
    would be drawn, how much the burn draws and how much expires unused at the grant's
    expiry. Exact integers, the ledger's own rules (earliest expiry first). Debt is not
    settled by a burn, only by grants. Changes nothing; unknown accounts are 404.

    Args:
        account_id (str): 1 to 128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or
            digit.
        burn_rate (int): Credits consumed per timestamp unit: a consumption of `burn_rate` at
            every integer time from the account's clock. 1 to 2^53-1.
        resource (None | str | Unset): The GPU class the burn runs on: unrestricted grants and
            those listing it pay. Omitted: no class, so unrestricted grants alone pay.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ForecastResponse | Problem]
    """

    kwargs = _get_kwargs(
        account_id=account_id,
        burn_rate=burn_rate,
        resource=resource,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    account_id: str,
    *,
    client: AuthenticatedClient,
    burn_rate: int,
    resource: None | str | Unset = UNSET,
) -> ForecastResponse | Problem | None:
    """Forecast a constant burn: when credits run out, what expires unused

     If the account consumed `burn_rate` credits (of class `resource`) at every integer
    time from its clock on, and nothing else happened: when the credits it can draw run out
    (`run_out_at`, the first step not covered in full) and, grant by grant in the order they
    would be drawn, how much the burn draws and how much expires unused at the grant's
    expiry. Exact integers, the ledger's own rules (earliest expiry first). Debt is not
    settled by a burn, only by grants. Changes nothing; unknown accounts are 404.

    Args:
        account_id (str): 1 to 128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or
            digit.
        burn_rate (int): Credits consumed per timestamp unit: a consumption of `burn_rate` at
            every integer time from the account's clock. 1 to 2^53-1.
        resource (None | str | Unset): The GPU class the burn runs on: unrestricted grants and
            those listing it pay. Omitted: no class, so unrestricted grants alone pay.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ForecastResponse | Problem
    """

    return sync_detailed(
        account_id=account_id,
        client=client,
        burn_rate=burn_rate,
        resource=resource,
    ).parsed


async def asyncio_detailed(
    account_id: str,
    *,
    client: AuthenticatedClient,
    burn_rate: int,
    resource: None | str | Unset = UNSET,
) -> Response[ForecastResponse | Problem]:
    """Forecast a constant burn: when credits run out, what expires unused

     If the account consumed `burn_rate` credits (of class `resource`) at every integer
    time from its clock on, and nothing else happened: when the credits it can draw run out
    (`run_out_at`, the first step not covered in full) and, grant by grant in the order they
    would be drawn, how much the burn draws and how much expires unused at the grant's
    expiry. Exact integers, the ledger's own rules (earliest expiry first). Debt is not
    settled by a burn, only by grants. Changes nothing; unknown accounts are 404.

    Args:
        account_id (str): 1 to 128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or
            digit.
        burn_rate (int): Credits consumed per timestamp unit: a consumption of `burn_rate` at
            every integer time from the account's clock. 1 to 2^53-1.
        resource (None | str | Unset): The GPU class the burn runs on: unrestricted grants and
            those listing it pay. Omitted: no class, so unrestricted grants alone pay.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ForecastResponse | Problem]
    """

    kwargs = _get_kwargs(
        account_id=account_id,
        burn_rate=burn_rate,
        resource=resource,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    account_id: str,
    *,
    client: AuthenticatedClient,
    burn_rate: int,
    resource: None | str | Unset = UNSET,
) -> ForecastResponse | Problem | None:
    """Forecast a constant burn: when credits run out, what expires unused

     If the account consumed `burn_rate` credits (of class `resource`) at every integer
    time from its clock on, and nothing else happened: when the credits it can draw run out
    (`run_out_at`, the first step not covered in full) and, grant by grant in the order they
    would be drawn, how much the burn draws and how much expires unused at the grant's
    expiry. Exact integers, the ledger's own rules (earliest expiry first). Debt is not
    settled by a burn, only by grants. Changes nothing; unknown accounts are 404.

    Args:
        account_id (str): 1 to 128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or
            digit.
        burn_rate (int): Credits consumed per timestamp unit: a consumption of `burn_rate` at
            every integer time from the account's clock. 1 to 2^53-1.
        resource (None | str | Unset): The GPU class the burn runs on: unrestricted grants and
            those listing it pay. Omitted: no class, so unrestricted grants alone pay.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ForecastResponse | Problem
    """

    return (
        await asyncio_detailed(
            account_id=account_id,
            client=client,
            burn_rate=burn_rate,
            resource=resource,
        )
    ).parsed
