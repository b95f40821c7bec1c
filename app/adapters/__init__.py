"""Adapters that implement the service's port (``app.service.unit_of_work.LedgerPort``):
``embedded`` (memory or SQLite, trackers in process memory) and ``postgres`` (shared)."""
