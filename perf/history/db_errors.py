"""How the results database and its errors are named in a one-line error: the URL as a user writes it, its
password hidden, and the driver's message without what that URL already says."""

from __future__ import annotations

import re

from sqlalchemy.engine import URL

# What psycopg's connection error repeats of the URL shown beside it (the address and port of each
# attempt), and the advice it appends: left out, so that the error fits a line. A socket's path is kept.
_SAID_BY_THE_URL = (
    (re.compile(r"^connection failed: "), ""),
    (re.compile(r'connection to server at "[^"]*"(, port \d+)? failed: '), ""),
    (re.compile(r"failed to resolve host '[^']*': (\[Errno -?\d+\] )?(.*)"), r"unknown host (\2)"),
    (re.compile(r" ?Is the server running [^?]*\?"), ""),
)


def reason(err: Exception) -> str:
    """The driver's message of a database error, on one line, without what the URL beside it says."""
    orig = getattr(err, "orig", None)
    text = " ".join(str(orig if orig is not None else err).split())
    for pattern, replacement in _SAID_BY_THE_URL:
        text = pattern.sub(replacement, text)
    return text[:400]


def shown(url: URL) -> str:
    """The URL as a user writes it: no password, and the backend without the driver chosen for it."""
    return url.set(drivername=url.get_backend_name()).render_as_string(hide_password=True)


def hide(raw: str) -> str:
    """A URL that does not parse, its password (user:password@) hidden all the same."""
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", raw)
