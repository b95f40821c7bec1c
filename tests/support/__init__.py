"""What the tests share, written once.

- ``model``: the one reference model of an account (SPEC section 1, the ledger's entries,
  the read semantics), deliberately naive.
- ``spec_examples``: SPEC Examples 1 and 2 as one table of operations and expected answers.
- ``api``: helpers for driving the HTTP API in process (requests, problem documents,
  snapshots of an account).
- ``app_runner``: the one way to run the app in process (lifespan and an httpx client).
- ``server_process`` and ``pg_server``: real ``gpu-credits serve`` processes and a
  throwaway PostgreSQL server; ``pg_pool``: empty databases on it, reused between tests.
"""
