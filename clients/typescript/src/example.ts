// An example that uses the typed client (src/client.ts): a grant, a consumption beyond it
// (debt), a grant that settles the debt, and the balance, printed as one JSON line.
//
//   npm ci && npx tsc && GPU_CREDITS_URL=http://127.0.0.1:8000 GPU_CREDITS_KEY=gck_... \
//     node dist/example.js ACCOUNT_ID
//
// The key needs the scopes credits:grant, credits:consume and credits:read. An answer other
// than success is printed as its problem document, and the exit code is 1.
import { balance, consume, creditsClient, grant, ProblemError } from "./client.js";

const url = process.env["GPU_CREDITS_URL"] ?? "http://127.0.0.1:8000";
const key = process.env["GPU_CREDITS_KEY"];
const account = process.argv[2];
if (key === undefined || account === undefined) {
  console.error("usage: GPU_CREDITS_KEY=gck_... [GPU_CREDITS_URL=...] node dist/example.js ACCOUNT");
  process.exit(2);
}
const client = creditsClient(url, key);

try {
  const first = await grant(client, account, { amount: 100, timestamp: 0, expiry: 50 });
  const used = await consume(client, account, { amount: 130, timestamp: 10 });
  const topUp = await grant(client, account, { amount: 40, timestamp: 20, expiry: 90 }, "top-up-1");
  const now = await balance(client, account, 20);
  const summary = {
    grant_id: first.grant_id,
    consumed: used.consumed,
    debt_added: used.debt_added,
    settled_debt: topUp.settled_debt,
    retained: topUp.retained,
    balance: now.balance,
    available: now.available,
    debt: now.debt,
  };
  console.log(JSON.stringify(summary));
} catch (exc) {
  if (!(exc instanceof ProblemError)) throw exc;
  console.log(JSON.stringify({ status: exc.status, problem: exc.problem }));
  process.exitCode = 1;
}
