from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.grant_detail_response import GrantDetailResponse
from ...models.problem import Problem
from ...types import Response


def _get_kwargs(
    account_id: str,
    grant_id: int,
) -> dict[str, Any]:

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/accounts/{account_id}/grants/{grant_id}".format(
            account_id=quote(str(account_id), safe=""),
            grant_id=quote(str(grant_id), safe=""),
        ),
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> GrantDetailResponse | Problem | None:
    if response.status_code == 200:
        response_200 = GrantDetailResponse.from_dict(response.json())

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
) -> Response[GrantDetailResponse | Problem]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    account_id: str,
    grant_id: int,
    *,
    client: AuthenticatedClient,
) -> Response[GrantDetailResponse | Problem]:
    """One grant

    Args:
        account_id (str): 1 to 128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or
            digit.
        grant_id (int):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[GrantDetailResponse | Problem]
    """

    kwargs = _get_kwargs(
        account_id=account_id,
        grant_id=grant_id,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    account_id: str,
    grant_id: int,
    *,
    client: AuthenticatedClient,
) -> GrantDetailResponse | Problem | None:
    """One grant

    Args:
        account_id (str): 1 to 128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or
            digit.
        grant_id (int):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        GrantDetailResponse | Problem
    """

    return sync_detailed(
        account_id=account_id,
        grant_id=grant_id,
        client=client,
    ).parsed


async def asyncio_detailed(
    account_id: str,
    grant_id: int,
    *,
    client: AuthenticatedClient,
) -> Response[GrantDetailResponse | Problem]:
    """One grant

    Args:
        account_id (str): 1 to 128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or
            digit.
        grant_id (int):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[GrantDetailResponse | Problem]
    """

    kwargs = _get_kwargs(
        account_id=account_id,
        grant_id=grant_id,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    account_id: str,
    grant_id: int,
    *,
    client: AuthenticatedClient,
) -> GrantDetailResponse | Problem | None:
    """One grant

    Args:
        account_id (str): 1 to 128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or
            digit.
        grant_id (int):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        GrantDetailResponse | Problem
    """

    return (
        await asyncio_detailed(
            account_id=account_id,
            grant_id=grant_id,
            client=client,
        )
    ).parsed
