"""argparse types that refuse a meaningless value at parse time (one line, exit 2), not after the work."""
from __future__ import annotations

import argparse
import math
import re
import urllib.parse

class OneLineParser(argparse.ArgumentParser):
    """A usage error is one line naming the option (the usage is in --help), exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (--help for usage)\n")


_RANK_POLICY = re.compile(r"^(mean|max|rank:.+)$")
_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")  # a name or IPv4 address (IPv6 has ":")


def positive_int(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not {text!r}")
    return value


def non_negative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 0, not {text!r}")
    return value


def port(text: str) -> int:
    value = _int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number from 0 to 65535, not {text!r}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, not {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, not {text!r}")
    return value


def rank_policy(text: str) -> str:
    if not _RANK_POLICY.match(text):
        raise argparse.ArgumentTypeError(f"must be mean, max or rank:LABEL, not {text!r}")
    return text


def pushgateway_url(text: str) -> str:
    """host:port or http(s)://host[:port][/path], as the push accepts it."""
    url = text if "://" in text else "http://" + text
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a URL (host:port or http://host:port): {text!r}") from None
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https") or not (_HOST.match(host) or ":" in host):
        raise argparse.ArgumentTypeError(f"not a URL (host:port or http://host:port): {text!r}")
    return text


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None
