from http import HTTPStatus
from typing import Any

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.batch_request import BatchRequest
from ...models.batch_response import BatchResponse
from ...models.problem import Problem
from ...types import UNSET, Response, Unset


def _get_kwargs(
    *,
    body: BatchRequest,
    idempotency_key: str | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(idempotency_key, Unset):
        headers["Idempotency-Key"] = idempotency_key

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/batch",
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> BatchResponse | Problem | None:
    if response.status_code == 200:
        response_200 = BatchResponse.from_dict(response.json())

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
) -> Response[BatchResponse | Problem]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    body: BatchRequest,
    idempotency_key: str | Unset = UNSET,
) -> Response[BatchResponse | Problem]:
    """Many grants, consumptions and balance reads in one request

     Up to 10,000 operations, each naming its account, applied in the order given and made
    durable with one commit. Each result carries the status and body the single endpoint
    would have answered; one failure does not stop the others. With `"atomic": true` the
    batch is all or nothing: on the first failure nothing is applied, and the answer is a
    problem document with the failing operation's status, `operation_index` and
    `operation_problem`. The key needs the scope of every operation in the batch; an
    `Idempotency-Key` on a batch is scoped to batches.

    Args:
        idempotency_key (str | Unset):
        body (BatchRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[BatchResponse | Problem]
    """

    kwargs = _get_kwargs(
        body=body,
        idempotency_key=idempotency_key,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    *,
    client: AuthenticatedClient,
    body: BatchRequest,
    idempotency_key: str | Unset = UNSET,
) -> BatchResponse | Problem | None:
    """Many grants, consumptions and balance reads in one request

     Up to 10,000 operations, each naming its account, applied in the order given and made
    durable with one commit. Each result carries the status and body the single endpoint
    would have answered; one failure does not stop the others. With `"atomic": true` the
    batch is all or nothing: on the first failure nothing is applied, and the answer is a
    problem document with the failing operation's status, `operation_index` and
    `operation_problem`. The key needs the scope of every operation in the batch; an
    `Idempotency-Key` on a batch is scoped to batches.

    Args:
        idempotency_key (str | Unset):
        body (BatchRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        BatchResponse | Problem
    """

    return sync_detailed(
        client=client,
        body=body,
        idempotency_key=idempotency_key,
    ).parsed


async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    body: BatchRequest,
    idempotency_key: str | Unset = UNSET,
) -> Response[BatchResponse | Problem]:
    """Many grants, consumptions and balance reads in one request

     Up to 10,000 operations, each naming its account, applied in the order given and made
    durable with one commit. Each result carries the status and body the single endpoint
    would have answered; one failure does not stop the others. With `"atomic": true` the
    batch is all or nothing: on the first failure nothing is applied, and the answer is a
    problem document with the failing operation's status, `operation_index` and
    `operation_problem`. The key needs the scope of every operation in the batch; an
    `Idempotency-Key` on a batch is scoped to batches.

    Args:
        idempotency_key (str | Unset):
        body (BatchRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[BatchResponse | Problem]
    """

    kwargs = _get_kwargs(
        body=body,
        idempotency_key=idempotency_key,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    *,
    client: AuthenticatedClient,
    body: BatchRequest,
    idempotency_key: str | Unset = UNSET,
) -> BatchResponse | Problem | None:
    """Many grants, consumptions and balance reads in one request

     Up to 10,000 operations, each naming its account, applied in the order given and made
    durable with one commit. Each result carries the status and body the single endpoint
    would have answered; one failure does not stop the others. With `"atomic": true` the
    batch is all or nothing: on the first failure nothing is applied, and the answer is a
    problem document with the failing operation's status, `operation_index` and
    `operation_problem`. The key needs the scope of every operation in the batch; an
    `Idempotency-Key` on a batch is scoped to batches.

    Args:
        idempotency_key (str | Unset):
        body (BatchRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        BatchResponse | Problem
    """

    return (
        await asyncio_detailed(
            client=client,
            body=body,
            idempotency_key=idempotency_key,
        )
    ).parsed
