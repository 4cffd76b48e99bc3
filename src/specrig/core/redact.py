"""Secrets stay out of logs, plans, summaries and reports: the password of a URL
with credentials, the value of a secret-looking command-line argument
(``--api-key``, tokens, passwords), and every secret specrig was handed (an API
key: :func:`register`) are replaced by ``***`` wherever specrig writes or prints
them. The real values are used, never recorded."""

from __future__ import annotations

import re
from collections import deque
from pathlib import Path

__all__ = ["excerpt", "is_secret_flag", "log_tail", "redact_argv", "redact_text", "register"]

_SECRET = re.compile(r"(api[-_]?key|token|secret|passw(or)?d|credential|auth)", re.I)
MASK = "***"
_MIN_SECRET = 4
"""Shorter values are not masked inside other text (a one-letter key would mask every such letter)."""
_KNOWN: set[str] = set()


def register(secret: str | None) -> None:
    """Mask ``secret`` (e.g. the API key the client sends) wherever :func:`redact_text` runs from now on."""
    if secret and len(secret) >= _MIN_SECRET:
        _KNOWN.add(secret)


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
    """Credentials of every URL inside ``text`` masked, and every registered secret."""

    def sub(m: re.Match[str]) -> str:
        if m.group("pw") is not None:
            return f"{m.group('scheme')}{m.group('user')}:{MASK}@"
        return f"{m.group('scheme')}{MASK}@"

    for secret in sorted(_KNOWN, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return _URL_CRED.sub(sub, text)


def excerpt(data: bytes | str, limit: int = 120) -> str:
    """The first ``limit`` characters of a body as one redacted line (whitespace runs, newlines
    included, become one space; ``...`` where it was cut): what an error quotes of an answer."""
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    shown = " ".join(redact_text(text[: 4 * limit]).split())  # masked before the cut: no secret is half shown
    return shown[:limit] + ("..." if len(shown) > limit or len(text) > 4 * limit else "")


def log_tail(path: Path, lines: int = 40) -> str:
    """The log's last ``lines`` lines, secrets masked (:func:`redact_text`)."""
    try:
        with open(path, errors="replace") as f:
            return redact_text("".join(deque(f, maxlen=lines)).rstrip())
    except OSError:
        return "(no log)"
