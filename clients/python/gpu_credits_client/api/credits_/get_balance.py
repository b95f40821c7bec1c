from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.balance_response import BalanceResponse
from ...models.problem import Problem
from ...types import UNSET, Response, Unset


def _get_kwargs(
    account_id: str,
    *,
    timestamp: int | None | Unset = UNSET,
    resource: None | str | Unset = UNSET,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    json_timestamp: int | None | Unset
    if isinstance(timestamp, Unset):
        json_timestamp = UNSET
    else:
        json_timestamp = timestamp
    params["timestamp"] = json_timestamp

    json_resource: None | str | Unset
    if isinstance(resource, Unset):
        json_resource = UNSET
    else:
        json_resource = resource
    params["resource"] = json_resource

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/accounts/{account_id}/balance".format(
            account_id=quote(str(account_id), safe=""),
        ),
        "params": params,
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> BalanceResponse | Problem | None:
    if response.status_code == 200:
        response_200 = BalanceResponse.from_dict(response.json())

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
) -> Response[BalanceResponse | Problem]:
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
    timestamp: int | None | Unset = UNSET,
    resource: None | str | Unset = UNSET,
) -> Response[BalanceResponse | Problem]:
    """Balance at a time

     `balance` = active credits - outstanding debt, in total or for one GPU class.
    Unknown accounts are 404.

    Args:
        account_id (str): 1 to 128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or
            digit.
        timestamp (int | None | Unset): Answer at this time; a read never changes the account. At
            or after the account's latest timestamp: the projected state (credits expiring at or
            before it no longer count). Before it: the state as of then, from the account's history.
            Omitted: the state at the account's latest timestamp.
        resource (None | str | Unset): Answer for one GPU class: `available` is what a consumption
            of it could draw, `debt` its own outstanding debt. Before the account's latest timestamp
            it is replayed from the nearest checkpoint; 422 when the stored history cannot answer it
            in bounded work (before the account's first checkpoint, or more writes back than a replay
            may take).

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[BalanceResponse | Problem]
    """

    kwargs = _get_kwargs(
        account_id=account_id,
        timestamp=timestamp,
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
    timestamp: int | None | Unset = UNSET,
    resource: None | str | Unset = UNSET,
) -> BalanceResponse | Problem | None:
    """Balance at a time

     `balance` = active credits - outstanding debt, in total or for one GPU class.
    Unknown accounts are 404.

    Args:
        account_id (str): 1 to 128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or
            digit.
        timestamp (int | None | Unset): Answer at this time; a read never changes the account. At
            or after the account's latest timestamp: the projected state (credits expiring at or
            before it no longer count). Before it: the state as of then, from the account's history.
            Omitted: the state at the account's latest timestamp.
        resource (None | str | Unset): Answer for one GPU class: `available` is what a consumption
            of it could draw, `debt` its own outstanding debt. Before the account's latest timestamp
            it is replayed from the nearest checkpoint; 422 when the stored history cannot answer it
            in bounded work (before the account's first checkpoint, or more writes back than a replay
            may take).

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        BalanceResponse | Problem
    """

    return sync_detailed(
        account_id=account_id,
        client=client,
        timestamp=timestamp,
        resource=resource,
    ).parsed


async def asyncio_detailed(
    account_id: str,
    *,
    client: AuthenticatedClient,
    timestamp: int | None | Unset = UNSET,
    resource: None | str | Unset = UNSET,
) -> Response[BalanceResponse | Problem]:
    """Balance at a time

     `balance` = active credits - outstanding debt, in total or for one GPU class.
    Unknown accounts are 404.

    Args:
        account_id (str): 1 to 128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or
            digit.
        timestamp (int | None | Unset): Answer at this time; a read never changes the account. At
            or after the account's latest timestamp: the projected state (credits expiring at or
            before it no longer count). Before it: the state as of then, from the account's history.
            Omitted: the state at the account's latest timestamp.
        resource (None | str | Unset): Answer for one GPU class: `available` is what a consumption
            of it could draw, `debt` its own outstanding debt. Before the account's latest timestamp
            it is replayed from the nearest checkpoint; 422 when the stored history cannot answer it
            in bounded work (before the account's first checkpoint, or more writes back than a replay
            may take).

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[BalanceResponse | Problem]
    """

    kwargs = _get_kwargs(
        account_id=account_id,
        timestamp=timestamp,
        resource=resource,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    account_id: str,
    *,
    client: AuthenticatedClient,
    timestamp: int | None | Unset = UNSET,
    resource: None | str | Unset = UNSET,
) -> BalanceResponse | Problem | None:
    """Balance at a time

     `balance` = active credits - outstanding debt, in total or for one GPU class.
    Unknown accounts are 404.

    Args:
        account_id (str): 1 to 128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or
            digit.
        timestamp (int | None | Unset): Answer at this time; a read never changes the account. At
            or after the account's latest timestamp: the projected state (credits expiring at or
            before it no longer count). Before it: the state as of then, from the account's history.
            Omitted: the state at the account's latest timestamp.
        resource (None | str | Unset): Answer for one GPU class: `available` is what a consumption
            of it could draw, `debt` its own outstanding debt. Before the account's latest timestamp
            it is replayed from the nearest checkpoint; 422 when the stored history cannot answer it
            in bounded work (before the account's first checkpoint, or more writes back than a replay
            may take).

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        BalanceResponse | Problem
    """

    return (
        await asyncio_detailed(
            account_id=account_id,
            client=client,
            timestamp=timestamp,
            resource=resource,
        )
    ).parsed
