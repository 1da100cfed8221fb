"""Personas used across the suite (owned by the budgets tests; extended as roles grow)."""
