"""Secrets stay out of logs, plans, summaries and reports: the password of a URL
with credentials, and the value of a secret-looking command-line argument
(``--api-key``, tokens, passwords) are replaced by ``***`` wherever specrig
writes or prints them. The real values are used, never recorded."""

from __future__ import annotations

import re

__all__ = ["redact_argv", "redact_text", "is_secret_flag"]

_SECRET = re.compile(r"(api[-_]?key|token|secret|passw(or)?d|credential|auth)", re.I)
MASK = "***"


def is_secret_flag(flag: str) -> bool:
    return flag.startswith("-") and bool(_SECRET.search(flag.split("=", 1)[0]))


def redact_argv(argv: list[str] | tuple[str, ...]) -> list[str]:
    """Mask the value of every secret-looking flag (``--api-key X`` and ``--api-key=X``) and URL credentials."""
    out: list[str] = []
    mask_next = False
    for a in argv:
        if mask_next:
            out.append(MASK)
            mask_next = False
            continue
        if is_secret_flag(a):
            if "=" in a:
                out.append(a.split("=", 1)[0] + "=" + MASK)
            else:
                out.append(a)
                mask_next = True
            continue
        out.append(redact_text(a))
    return out


_URL_CRED = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^/\s:@]*)(:(?P<pw>[^/\s@]*))?@")


def redact_text(text: str) -> str:
    """Credentials of every URL inside ``text`` masked."""

    def sub(m: re.Match[str]) -> str:
        if m.group("pw") is not None:
            return f"{m.group('scheme')}{m.group('user')}:{MASK}@"
        return f"{m.group('scheme')}{MASK}@"

    return _URL_CRED.sub(sub, text)
