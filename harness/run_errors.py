"""The one error a run's phases raise for an expected failure (its message is shown as is), and how
an error raised inside a Ray actor is shown by its own text."""


class RunFailed(Exception):
    """A phase could not complete; the message says which and what to do."""


def actor_error(exc: BaseException) -> BaseException:
    """The exception an actor raised: Ray delivers it wrapped (RayTaskError.cause), whose text
    would bury the node's own message under Ray's traceback."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc
