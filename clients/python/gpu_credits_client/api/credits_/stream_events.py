from http import HTTPStatus
from io import BytesIO
from typing import Any

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.problem import Problem
from ...types import File, Response


def _get_kwargs(
    *,
    body: File,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/events",
    }

    _kwargs["content"] = body.payload
    headers["Content-Type"] = "application/x-ndjson"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> File | Problem | None:
    if response.status_code == 200:
        response_200 = File(payload=BytesIO(response.content))

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


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[File | Problem]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    body: File,
) -> Response[File | Problem]:
    """A usage stream: one operation per NDJSON line, answered line by line

     Usage in volume: each line a grant, consumption or void naming its account, with the
    client's `id` for it (unique per account). Lines are applied in order and committed in
    chunks; the answer streams one result line per line as its chunk commits: the status and
    body the single endpoint would answer, a problem document for a line that is invalid,
    forbidden or refused (the stream goes on), or `"duplicate": true` for an id the account
    already applied (nothing changes). A client resumes after a failure by sending again
    from the first line without a result (the lines' ids make that safe: the stream takes
    no `Idempotency-Key`, 422). Each line needs its operation's scope and account; the key
    needs `credits:grant` or `credits:consume`.

    Args:
        body (File): NDJSON: one `EventLine` per line.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[File | Problem]
    """

    kwargs = _get_kwargs(
        body=body,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    *,
    client: AuthenticatedClient,
    body: File,
) -> File | Problem | None:
    """A usage stream: one operation per NDJSON line, answered line by line

     Usage in volume: each line a grant, consumption or void naming its account, with the
    client's `id` for it (unique per account). Lines are applied in order and committed in
    chunks; the answer streams one result line per line as its chunk commits: the status and
    body the single endpoint would answer, a problem document for a line that is invalid,
    forbidden or refused (the stream goes on), or `"duplicate": true` for an id the account
    already applied (nothing changes). A client resumes after a failure by sending again
    from the first line without a result (the lines' ids make that safe: the stream takes
    no `Idempotency-Key`, 422). Each line needs its operation's scope and account; the key
    needs `credits:grant` or `credits:consume`.

    Args:
        body (File): NDJSON: one `EventLine` per line.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        File | Problem
    """

    return sync_detailed(
        client=client,
        body=body,
    ).parsed


async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    body: File,
) -> Response[File | Problem]:
    """A usage stream: one operation per NDJSON line, answered line by line

     Usage in volume: each line a grant, consumption or void naming its account, with the
    client's `id` for it (unique per account). Lines are applied in order and committed in
    chunks; the answer streams one result line per line as its chunk commits: the status and
    body the single endpoint would answer, a problem document for a line that is invalid,
    forbidden or refused (the stream goes on), or `"duplicate": true` for an id the account
    already applied (nothing changes). A client resumes after a failure by sending again
    from the first line without a result (the lines' ids make that safe: the stream takes
    no `Idempotency-Key`, 422). Each line needs its operation's scope and account; the key
    needs `credits:grant` or `credits:consume`.

    Args:
        body (File): NDJSON: one `EventLine` per line.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[File | Problem]
    """

    kwargs = _get_kwargs(
        body=body,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    *,
    client: AuthenticatedClient,
    body: File,
) -> File | Problem | None:
    """A usage stream: one operation per NDJSON line, answered line by line

     Usage in volume: each line a grant, consumption or void naming its account, with the
    client's `id` for it (unique per account). Lines are applied in order and committed in
    chunks; the answer streams one result line per line as its chunk commits: the status and
    body the single endpoint would answer, a problem document for a line that is invalid,
    forbidden or refused (the stream goes on), or `"duplicate": true` for an id the account
    already applied (nothing changes). A client resumes after a failure by sending again
    from the first line without a result (the lines' ids make that safe: the stream takes
    no `Idempotency-Key`, 422). Each line needs its operation's scope and account; the key
    needs `credits:grant` or `credits:consume`.

    Args:
        body (File): NDJSON: one `EventLine` per line.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        File | Problem
    """

    return (
        await asyncio_detailed(
            client=client,
            body=body,
        )
    ).parsed
