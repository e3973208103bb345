"""Errors the faces show to users as one line (no traceback)."""


class ServiceError(Exception):
    """Base: str(exc) is the whole message for the user."""

    exit_code = 1


class TritonUnavailable(ServiceError):
    """Triton does not answer: down (nothing listens at its address), or, as ``TritonTimeout``, too slow."""

    exit_code = 3


class TritonTimeout(TritonUnavailable):
    """Triton is there (its port answers) but a call missed its deadline on every try its retry budget
    allowed: busy or stopped, not down. Try again later; nothing needs starting. A TritonUnavailable, so
    whatever waits for a Triton that is down waits for this one too."""

    exit_code = 9


class TritonError(ServiceError):
    """The local Triton server could not be started, stopped or found."""

    exit_code = 3


class ModelNotReady(ServiceError):
    exit_code = 4


class ModelUnhealthy(ModelNotReady):
    """Loaded, but its backend process in Triton died (the model-ready flag still says READY)."""


class StoreUnavailable(ServiceError):
    exit_code = 5


class StoreInUse(StoreUnavailable):
    """An embedded store that another process holds; ``pid`` when it is known."""

    def __init__(self, message: str, pid: int | None = None) -> None:
        super().__init__(message)
        self.pid = pid


class Busy(ServiceError):
    """Too many requests of a kind waiting already: try again in ``retry_after`` seconds."""

    exit_code = 3  # unavailable for now, as Triton down

    def __init__(self, message: str, retry_after: int = 5) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class EmptyCollection(ServiceError):
    exit_code = 6


class BadRequest(ServiceError):
    """A value that cannot be used; ``param`` names the field at fault when there is one."""

    exit_code = 2

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class NotFound(BadRequest):
    """A named thing (a model, a passage, a knowledge base, an API key) that does not exist."""


def not_served(model: str, family: str) -> str:
    """How to make a model that Triton does not serve available."""
    return (f"the {family} model is not served ('{model}' is not loaded in Triton): build it with "
            f"`search models build` (see `search models build --help` for weight sources), then restart Triton")
