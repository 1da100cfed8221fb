"""Errors the exception services raise. Each names the field at fault, so a page shows the
message beside the input and the API answers ``{"message", "field"}``."""


class ExceptionError(Exception):
    def __init__(self, field: str | None, message: str):
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message


class ExceptionValidationError(ExceptionError):
    """The request or decision is invalid; nothing changed."""


class ExceptionPermissionError(ExceptionError):
    """The caller may see the request but may not take this action on it."""


class InvalidTransition(ExceptionValidationError):
    """The state machine does not allow this move (or someone else moved it first)."""

    def __init__(self, message: str):
        super().__init__("state", message)
