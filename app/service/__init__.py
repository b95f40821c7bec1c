"""The service layer: every ledger operation written once (``ledger``), against a port
(``unit_of_work``) that the adapters in ``app.adapters`` implement. Pure rules per operation
live in ``journal``; nothing here knows HTTP or SQL."""
