"""The one error a run's phases raise for an expected failure (its message is shown as is)."""


class RunFailed(Exception):
    """A phase could not complete; the message says which and what to do."""
