class JobError(Exception):
    """A refused job request; ``field`` names the input at fault."""

    def __init__(self, field: str | None, message: str):
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message


class JobValidationError(JobError):
    pass


class JobPermissionError(JobError):
    pass
