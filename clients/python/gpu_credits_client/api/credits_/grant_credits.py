from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.grant_request import GrantRequest
from ...models.grant_response import GrantResponse
from ...models.problem import Problem
from ...types import UNSET, Response, Unset


def _get_kwargs(
    account_id: str,
    *,
    body: GrantRequest,
    idempotency_key: str | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(idempotency_key, Unset):
        headers["Idempotency-Key"] = idempotency_key

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/accounts/{account_id}/grants".format(
            account_id=quote(str(account_id), safe=""),
        ),
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> GrantResponse | Problem | None:
    if response.status_code == 201:
        response_201 = GrantResponse.from_dict(response.json())

        return response_201

    if response.status_code == 400:
        response_400 = Problem.from_dict(response.json())

        return response_400

    if response.status_code == 401:
        response_401 = Problem.from_dict(response.json())

        return response_401

    if response.status_code == 403:
        response_403 = Problem.from_dict(response.json())

        return response_403

    if response.status_code == 408:
        response_408 = Problem.from_dict(response.json())

        return response_408

    if response.status_code == 409:
        response_409 = Problem.from_dict(response.json())

        return response_409

    if response.status_code == 413:
        response_413 = Problem.from_dict(response.json())

        return response_413

    if response.status_code == 414:
        response_414 = Problem.from_dict(response.json())

        return response_414

    if response.status_code == 415:
        response_415 = Problem.from_dict(response.json())

        return response_415

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
) -> Response[GrantResponse | Problem]:
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
    body: GrantRequest,
    idempotency_key: str | Unset = UNSET,
) -> Response[GrantResponse | Problem]:
    """Grant credits that expire

     Grant `amount` credits usable from `timestamp` until `expiry` (exclusive). Outstanding
    debt is settled first; only the rest is kept. Creates the account if it is new.

    Args:
        account_id (str): 1 to 128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or
            digit.
        idempotency_key (str | Unset):
        body (GrantRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[GrantResponse | Problem]
    """

    kwargs = _get_kwargs(
        account_id=account_id,
        body=body,
        idempotency_key=idempotency_key,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    account_id: str,
    *,
    client: AuthenticatedClient,
    body: GrantRequest,
    idempotency_key: str | Unset = UNSET,
) -> GrantResponse | Problem | None:
    """Grant credits that expire

     Grant `amount` credits usable from `timestamp` until `expiry` (exclusive). Outstanding
    debt is settled first; only the rest is kept. Creates the account if it is new.

    Args:
        account_id (str): 1 to 128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or
            digit.
        idempotency_key (str | Unset):
        body (GrantRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        GrantResponse | Problem
    """

    return sync_detailed(
        account_id=account_id,
        client=client,
        body=body,
        idempotency_key=idempotency_key,
    ).parsed


async def asyncio_detailed(
    account_id: str,
    *,
    client: AuthenticatedClient,
    body: GrantRequest,
    idempotency_key: str | Unset = UNSET,
) -> Response[GrantResponse | Problem]:
    """Grant credits that expire

     Grant `amount` credits usable from `timestamp` until `expiry` (exclusive). Outstanding
    debt is settled first; only the rest is kept. Creates the account if it is new.

    Args:
        account_id (str): 1 to 128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or
            digit.
        idempotency_key (str | Unset):
        body (GrantRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[GrantResponse | Problem]
    """

    kwargs = _get_kwargs(
        account_id=account_id,
        body=body,
        idempotency_key=idempotency_key,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    account_id: str,
    *,
    client: AuthenticatedClient,
    body: GrantRequest,
    idempotency_key: str | Unset = UNSET,
) -> GrantResponse | Problem | None:
    """Grant credits that expire

     Grant `amount` credits usable from `timestamp` until `expiry` (exclusive). Outstanding
    debt is settled first; only the rest is kept. Creates the account if it is new.

    Args:
        account_id (str): 1 to 128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or
            digit.
        idempotency_key (str | Unset):
        body (GrantRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        GrantResponse | Problem
    """

    return (
        await asyncio_detailed(
            account_id=account_id,
            client=client,
            body=body,
            idempotency_key=idempotency_key,
        )
    ).parsed
