from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.account_settings_request import AccountSettingsRequest
from ...models.account_settings_response import AccountSettingsResponse
from ...models.problem import Problem
from ...types import Response


def _get_kwargs(
    account_id: str,
    *,
    body: AccountSettingsRequest,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    _kwargs: dict[str, Any] = {
        "method": "put",
        "url": "/v1/accounts/{account_id}/settings".format(
            account_id=quote(str(account_id), safe=""),
        ),
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> AccountSettingsResponse | Problem | None:
    if response.status_code == 200:
        response_200 = AccountSettingsResponse.from_dict(response.json())

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
) -> Response[AccountSettingsResponse | Problem]:
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
    body: AccountSettingsRequest,
) -> Response[AccountSettingsResponse | Problem]:
    """Set the account's lateness window

     SPEC section 6: how far behind its clock the account accepts writes (null: the
    service's setting). Lowering the window moves the watermark forward at once (writes it
    passes become final); raising it never moves the watermark back. Setting the same value
    again changes nothing. Unknown accounts are 404 (settings do not create accounts).

    Args:
        account_id (str): 1 to 128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or
            digit.
        body (AccountSettingsRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[AccountSettingsResponse | Problem]
    """

    kwargs = _get_kwargs(
        account_id=account_id,
        body=body,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    account_id: str,
    *,
    client: AuthenticatedClient,
    body: AccountSettingsRequest,
) -> AccountSettingsResponse | Problem | None:
    """Set the account's lateness window

     SPEC section 6: how far behind its clock the account accepts writes (null: the
    service's setting). Lowering the window moves the watermark forward at once (writes it
    passes become final); raising it never moves the watermark back. Setting the same value
    again changes nothing. Unknown accounts are 404 (settings do not create accounts).

    Args:
        account_id (str): 1 to 128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or
            digit.
        body (AccountSettingsRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        AccountSettingsResponse | Problem
    """

    return sync_detailed(
        account_id=account_id,
        client=client,
        body=body,
    ).parsed


async def asyncio_detailed(
    account_id: str,
    *,
    client: AuthenticatedClient,
    body: AccountSettingsRequest,
) -> Response[AccountSettingsResponse | Problem]:
    """Set the account's lateness window

     SPEC section 6: how far behind its clock the account accepts writes (null: the
    service's setting). Lowering the window moves the watermark forward at once (writes it
    passes become final); raising it never moves the watermark back. Setting the same value
    again changes nothing. Unknown accounts are 404 (settings do not create accounts).

    Args:
        account_id (str): 1 to 128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or
            digit.
        body (AccountSettingsRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[AccountSettingsResponse | Problem]
    """

    kwargs = _get_kwargs(
        account_id=account_id,
        body=body,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    account_id: str,
    *,
    client: AuthenticatedClient,
    body: AccountSettingsRequest,
) -> AccountSettingsResponse | Problem | None:
    """Set the account's lateness window

     SPEC section 6: how far behind its clock the account accepts writes (null: the
    service's setting). Lowering the window moves the watermark forward at once (writes it
    passes become final); raising it never moves the watermark back. Setting the same value
    again changes nothing. Unknown accounts are 404 (settings do not create accounts).

    Args:
        account_id (str): 1 to 128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or
            digit.
        body (AccountSettingsRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        AccountSettingsResponse | Problem
    """

    return (
        await asyncio_detailed(
            account_id=account_id,
            client=client,
            body=body,
        )
    ).parsed
