from http import HTTPStatus
from typing import Any

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.account_page import AccountPage
from ...models.problem import Problem
from ...types import UNSET, Response, Unset


def _get_kwargs(
    *,
    prefix: str | Unset = "",
    after: str | Unset = "",
    limit: int | Unset = 100,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    params["prefix"] = prefix

    params["after"] = after

    params["limit"] = limit

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/accounts",
        "params": params,
    }

    return _kwargs


def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> AccountPage | Problem | None:
    if response.status_code == 200:
        response_200 = AccountPage.from_dict(response.json())

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
) -> Response[AccountPage | Problem]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    prefix: str | Unset = "",
    after: str | Unset = "",
    limit: int | Unset = 100,
) -> Response[AccountPage | Problem]:
    """Accounts, in byte order of their id, cursor-paginated

     The accounts that exist (a write was accepted on them; a failed request creates
    none), in byte order of `account_id` (ASCII: `-` `.` digits `:` upper case `_` lower
    case, so `A` before `a` and `team-a-x` before `team-a:x`), each with its balance,
    available credits and debt at its clock, as getBalance answers without `timestamp`.
    Pages of at most 1,000: pass `next_after` as `after` for the next page.

    An API key limited to an account prefix lists only the accounts within it: the accounts
    listed start with both the key's prefix and `prefix`. When the two exclude each other
    (a key for `team-a:` asking for `prefix=team-b:`) the answer is an empty page, not an
    error. Changes nothing.

    Args:
        prefix (str | Unset): Only accounts whose id starts with this (case-sensitive; empty or
            omitted: every account). Empty, or the start of a valid account id. Default: ''.
        after (str | Unset): Only accounts whose id comes after this one in byte order: the
            previous page's `next_after`. Empty or omitted: from the first. Default: ''.
        limit (int | Unset): Page size, 1 to 1000. Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[AccountPage | Problem]
    """

    kwargs = _get_kwargs(
        prefix=prefix,
        after=after,
        limit=limit,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    *,
    client: AuthenticatedClient,
    prefix: str | Unset = "",
    after: str | Unset = "",
    limit: int | Unset = 100,
) -> AccountPage | Problem | None:
    """Accounts, in byte order of their id, cursor-paginated

     The accounts that exist (a write was accepted on them; a failed request creates
    none), in byte order of `account_id` (ASCII: `-` `.` digits `:` upper case `_` lower
    case, so `A` before `a` and `team-a-x` before `team-a:x`), each with its balance,
    available credits and debt at its clock, as getBalance answers without `timestamp`.
    Pages of at most 1,000: pass `next_after` as `after` for the next page.

    An API key limited to an account prefix lists only the accounts within it: the accounts
    listed start with both the key's prefix and `prefix`. When the two exclude each other
    (a key for `team-a:` asking for `prefix=team-b:`) the answer is an empty page, not an
    error. Changes nothing.

    Args:
        prefix (str | Unset): Only accounts whose id starts with this (case-sensitive; empty or
            omitted: every account). Empty, or the start of a valid account id. Default: ''.
        after (str | Unset): Only accounts whose id comes after this one in byte order: the
            previous page's `next_after`. Empty or omitted: from the first. Default: ''.
        limit (int | Unset): Page size, 1 to 1000. Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        AccountPage | Problem
    """

    return sync_detailed(
        client=client,
        prefix=prefix,
        after=after,
        limit=limit,
    ).parsed


async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    prefix: str | Unset = "",
    after: str | Unset = "",
    limit: int | Unset = 100,
) -> Response[AccountPage | Problem]:
    """Accounts, in byte order of their id, cursor-paginated

     The accounts that exist (a write was accepted on them; a failed request creates
    none), in byte order of `account_id` (ASCII: `-` `.` digits `:` upper case `_` lower
    case, so `A` before `a` and `team-a-x` before `team-a:x`), each with its balance,
    available credits and debt at its clock, as getBalance answers without `timestamp`.
    Pages of at most 1,000: pass `next_after` as `after` for the next page.

    An API key limited to an account prefix lists only the accounts within it: the accounts
    listed start with both the key's prefix and `prefix`. When the two exclude each other
    (a key for `team-a:` asking for `prefix=team-b:`) the answer is an empty page, not an
    error. Changes nothing.

    Args:
        prefix (str | Unset): Only accounts whose id starts with this (case-sensitive; empty or
            omitted: every account). Empty, or the start of a valid account id. Default: ''.
        after (str | Unset): Only accounts whose id comes after this one in byte order: the
            previous page's `next_after`. Empty or omitted: from the first. Default: ''.
        limit (int | Unset): Page size, 1 to 1000. Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[AccountPage | Problem]
    """

    kwargs = _get_kwargs(
        prefix=prefix,
        after=after,
        limit=limit,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    *,
    client: AuthenticatedClient,
    prefix: str | Unset = "",
    after: str | Unset = "",
    limit: int | Unset = 100,
) -> AccountPage | Problem | None:
    """Accounts, in byte order of their id, cursor-paginated

     The accounts that exist (a write was accepted on them; a failed request creates
    none), in byte order of `account_id` (ASCII: `-` `.` digits `:` upper case `_` lower
    case, so `A` before `a` and `team-a-x` before `team-a:x`), each with its balance,
    available credits and debt at its clock, as getBalance answers without `timestamp`.
    Pages of at most 1,000: pass `next_after` as `after` for the next page.

    An API key limited to an account prefix lists only the accounts within it: the accounts
    listed start with both the key's prefix and `prefix`. When the two exclude each other
    (a key for `team-a:` asking for `prefix=team-b:`) the answer is an empty page, not an
    error. Changes nothing.

    Args:
        prefix (str | Unset): Only accounts whose id starts with this (case-sensitive; empty or
            omitted: every account). Empty, or the start of a valid account id. Default: ''.
        after (str | Unset): Only accounts whose id comes after this one in byte order: the
            previous page's `next_after`. Empty or omitted: from the first. Default: ''.
        limit (int | Unset): Page size, 1 to 1000. Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        AccountPage | Problem
    """

    return (
        await asyncio_detailed(
            client=client,
            prefix=prefix,
            after=after,
            limit=limit,
        )
    ).parsed
