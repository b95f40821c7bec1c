from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.consume_request import ConsumeRequest
from ...models.consume_response import ConsumeResponse
from ...models.problem import Problem
from ...types import UNSET, Response, Unset


def _get_kwargs(
    account_id: str,
    *,
    body: ConsumeRequest,
    dry_run: bool | Unset = UNSET,
    idempotency_key: str | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(idempotency_key, Unset):
        headers["Idempotency-Key"] = idempotency_key

    params: dict[str, Any] = {}

    params["dry_run"] = dry_run

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/accounts/{account_id}/consumptions".format(
            account_id=quote(str(account_id), safe=""),
        ),
        "params": params,
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> ConsumeResponse | Problem | None:
    if response.status_code == 200:
        response_200 = ConsumeResponse.from_dict(response.json())

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
) -> Response[ConsumeResponse | Problem]:
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
    body: ConsumeRequest,
    dry_run: bool | Unset = UNSET,
    idempotency_key: str | Unset = UNSET,
) -> Response[ConsumeResponse | Problem]:
    """Consume credits, earliest expiry first

     Consume `amount` credits at `timestamp`, earliest-expiring first. What active credits
    cannot cover becomes debt. `debt` in the answer is the total outstanding debt. With
    `?dry_run=true`, nothing is consumed: the answer is what the consumption would do.

    Args:
        account_id (str): 1 to 128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or
            digit.
        dry_run (bool | Unset):
        idempotency_key (str | Unset):
        body (ConsumeRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ConsumeResponse | Problem]
    """

    kwargs = _get_kwargs(
        account_id=account_id,
        body=body,
        dry_run=dry_run,
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
    body: ConsumeRequest,
    dry_run: bool | Unset = UNSET,
    idempotency_key: str | Unset = UNSET,
) -> ConsumeResponse | Problem | None:
    """Consume credits, earliest expiry first

     Consume `amount` credits at `timestamp`, earliest-expiring first. What active credits
    cannot cover becomes debt. `debt` in the answer is the total outstanding debt. With
    `?dry_run=true`, nothing is consumed: the answer is what the consumption would do.

    Args:
        account_id (str): 1 to 128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or
            digit.
        dry_run (bool | Unset):
        idempotency_key (str | Unset):
        body (ConsumeRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ConsumeResponse | Problem
    """

    return sync_detailed(
        account_id=account_id,
        client=client,
        body=body,
        dry_run=dry_run,
        idempotency_key=idempotency_key,
    ).parsed


async def asyncio_detailed(
    account_id: str,
    *,
    client: AuthenticatedClient,
    body: ConsumeRequest,
    dry_run: bool | Unset = UNSET,
    idempotency_key: str | Unset = UNSET,
) -> Response[ConsumeResponse | Problem]:
    """Consume credits, earliest expiry first

     Consume `amount` credits at `timestamp`, earliest-expiring first. What active credits
    cannot cover becomes debt. `debt` in the answer is the total outstanding debt. With
    `?dry_run=true`, nothing is consumed: the answer is what the consumption would do.

    Args:
        account_id (str): 1 to 128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or
            digit.
        dry_run (bool | Unset):
        idempotency_key (str | Unset):
        body (ConsumeRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ConsumeResponse | Problem]
    """

    kwargs = _get_kwargs(
        account_id=account_id,
        body=body,
        dry_run=dry_run,
        idempotency_key=idempotency_key,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    account_id: str,
    *,
    client: AuthenticatedClient,
    body: ConsumeRequest,
    dry_run: bool | Unset = UNSET,
    idempotency_key: str | Unset = UNSET,
) -> ConsumeResponse | Problem | None:
    """Consume credits, earliest expiry first

     Consume `amount` credits at `timestamp`, earliest-expiring first. What active credits
    cannot cover becomes debt. `debt` in the answer is the total outstanding debt. With
    `?dry_run=true`, nothing is consumed: the answer is what the consumption would do.

    Args:
        account_id (str): 1 to 128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or
            digit.
        dry_run (bool | Unset):
        idempotency_key (str | Unset):
        body (ConsumeRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ConsumeResponse | Problem
    """

    return (
        await asyncio_detailed(
            account_id=account_id,
            client=client,
            body=body,
            dry_run=dry_run,
            idempotency_key=idempotency_key,
        )
    ).parsed
