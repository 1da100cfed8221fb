"""Errors the budget services raise. Each names the field at fault, so a page can show the
message beside the input and the API can answer ``{"message", "field"}``."""


class BudgetError(Exception):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class BudgetValidationError(BudgetError):
    """The input is wrong (negative, too large, breaks the tree's rules); nothing changed."""


class InsufficientFunds(BudgetValidationError):
    """The node's remaining balance does not cover the lien asked for."""


class ConflictError(BudgetError):
    """Someone changed the value since the caller read it (optimistic concurrency)."""

    def __init__(self, field: str, message: str, current_version: int | None = None):
        super().__init__(field, message)
        self.current_version = current_version
