// A typed client for gpu-credits: openapi-fetch over the types openapi-typescript generated
// from openapi/openapi.json (src/schema.d.ts, never edited by hand). Every path, parameter,
// request body and response below is checked by tsc against that document: a misspelt path,
// a string where the API takes an integer, a missing member or one the API does not send is
// a compile error. Figures are JavaScript numbers: the API's integers stop at 2^53-1
// (Number.MAX_SAFE_INTEGER), so they are exact.
import createClient, { type Client } from "openapi-fetch";

import type { components, paths } from "./schema.js";

type Schemas = components["schemas"];
export type GrantRequest = Schemas["GrantRequest"];
export type GrantResponse = Schemas["GrantResponse"];
export type ConsumeRequest = Schemas["ConsumeRequest"];
export type ConsumeResponse = Schemas["ConsumeResponse"];
export type BalanceResponse = Schemas["BalanceResponse"];
export type Problem = Schemas["Problem"];
export type CreditsClient = Client<paths>;

/** A client for the service at `baseUrl` that sends `apiKey` (`gck_...`) with every request. */
export function creditsClient(baseUrl: string, apiKey: string): CreditsClient {
  return createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${apiKey}` } });
}

/** An answer other than success: the service's RFC 9457 problem document. */
export class ProblemError extends Error {
  readonly problem: Problem;
  readonly status: number;

  constructor(problem: Problem, status: number) {
    super(`${status} ${problem.title}: ${problem.detail}`);
    this.name = "ProblemError";
    this.problem = problem;
    this.status = status;
  }
}

function idempotency(key: string | undefined): { "Idempotency-Key"?: string } {
  return key === undefined ? {} : { "Idempotency-Key": key };
}

/** Grant credits usable from `timestamp` until `expiry` (exclusive); debt is settled first. */
export async function grant(
  client: CreditsClient,
  accountId: string,
  body: GrantRequest,
  idempotencyKey?: string,
): Promise<GrantResponse> {
  const { data, error, response } = await client.POST("/v1/accounts/{account_id}/grants", {
    params: { path: { account_id: accountId }, header: idempotency(idempotencyKey) },
    body,
  });
  if (data === undefined) throw new ProblemError(error, response.status);
  return data;
}

/** Consume credits, earliest-expiring first; what no credit covers becomes debt. */
export async function consume(
  client: CreditsClient,
  accountId: string,
  body: ConsumeRequest,
  idempotencyKey?: string,
): Promise<ConsumeResponse> {
  const { data, error, response } = await client.POST("/v1/accounts/{account_id}/consumptions", {
    params: { path: { account_id: accountId }, header: idempotency(idempotencyKey) },
    body,
  });
  if (data === undefined) throw new ProblemError(error, response.status);
  return data;
}

/** The balance at `timestamp` (omitted: at the account's latest timestamp). */
export async function balance(
  client: CreditsClient,
  accountId: string,
  timestamp?: number,
): Promise<BalanceResponse> {
  const { data, error, response } = await client.GET("/v1/accounts/{account_id}/balance", {
    params: {
      path: { account_id: accountId },
      query: timestamp === undefined ? {} : { timestamp },
    },
  });
  if (data === undefined) throw new ProblemError(error, response.status);
  return data;
}
