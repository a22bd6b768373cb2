"""Shared pytest fixtures (each owner adds only fixtures here)."""

import pytest


@pytest.fixture
def mem_bank():
    """A fresh in-memory experience bank (schema migrated)."""
    from experience_bank.bank import Bank

    bank = Bank(":memory:")
    yield bank
    bank.close()


@pytest.fixture(autouse=True)
def _no_run_cache_unless_asked(monkeypatch):
    """The run cache is off in tests (a hit from an earlier test would skip the code under test);
    tests of the cache point AGENT_RUN_CACHE at their own directory and unset AGENT_NO_CACHE."""
    monkeypatch.setenv("AGENT_NO_CACHE", "1")
