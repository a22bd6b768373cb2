"""Shared pytest fixtures (each owner adds only fixtures here)."""

import pytest


@pytest.fixture
def mem_bank():
    """A fresh in-memory experience bank (schema migrated)."""
    from experience_bank.bank import Bank

    bank = Bank(":memory:")
    yield bank
    bank.close()
