"""URLs as they may be printed or stored: no credentials in the userinfo, no value of a secret-looking
query parameter.

Why from the text, not urllib: a URL is echoed most often when it is malformed (a port that is not a
number, a scheme left out), and that is when urllib refuses to split it; so the userinfo is what lies
between `scheme://` and the last `@` before the path, and a query parameter is `name=value` after `?`,
`&`, `;` or `#`, whatever else the URL holds. A URL without a scheme (`user:pw@host:9091`, as
--pushgateway takes it) is read as http.
"""
from __future__ import annotations

import re
import urllib.parse

from harness.node.secret_names import is_secret_name

MASK = "***"
# scheme:// then up to a space or quote; a trailing . , ; : ) ] } closes the sentence, not the URL
URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]*[^\s'\"<>`.,;:)\]}]")
# userinfo: from :// to the last @ before the first / (a password may hold ? or #)
_USERINFO = re.compile(r"(?<=://)(?P<userinfo>[^/]*)@")
_PARAMETER = re.compile(r"(?P<lead>[?&;#](?P<name>[^=&;#?/]+)=)(?P<value>[^&;#]*)")


def _secret_parameters(url: str):
    for match in _PARAMETER.finditer(url):
        if match.group("value") and is_secret_name(urllib.parse.unquote(match.group("name")), in_query=True):
            yield match


def url_credentials(text: str) -> list[str]:
    """Every URL's credentials in text, as written and percent-decoded: its userinfo, the password in it
    (user:password; a token alone as the user), and the value of each secret-looking query parameter."""
    found: list[str] = []
    for url in URL.findall(text):
        userinfo = _USERINFO.search(url)
        if userinfo:
            whole = userinfo.group("userinfo")
            user, sep, password = whole.partition(":")
            found += [whole, password if sep and password else user]
        found += [m.group("value") for m in _secret_parameters(url)]
    return [v for value in found if value for v in {value, urllib.parse.unquote(value)}]


def _masked_url(url: str) -> str:
    url = _USERINFO.sub(f"{MASK}@", url, count=1)
    for match in reversed(list(_secret_parameters(url))):
        url = url[:match.start("value")] + MASK + url[match.end("value"):]
    return url


def without_url_credentials(text: str) -> str:
    """Every URL in text shown without credentials: http://user:pw@host/?token=t -> http://***@host/?token=***."""
    return URL.sub(lambda m: _masked_url(m.group(0)), text)


def shown_url(url: str) -> str:
    """One URL, with or without its scheme, as it may be printed (a malformed one too)."""
    if "://" in url:
        return without_url_credentials(url)
    return without_url_credentials("http://" + url)[len("http://"):]
