"""Text the tool writes or shows: secrets redacted by name and by value, control characters and
undecodable bytes escaped. Base layer: every stage may use it.

- `redact` is applied where the tool writes: each results line, run.json and every JSON file it
  writes (`model.results`), log records (`log.setup_logging`), log tails quoted in bug reports and
  JUnit (`report`).
- `display` is applied where text is shown: every report format reads results through it
  (`report.store`), and the terminal stream of the CLI passes through `SafeStream`, so no escape
  sequence from a case reaches the terminal.
"""

from __future__ import annotations

import contextlib
import re
from typing import IO, Any, Final

__all__ = ["REDACTED", "SafeStream", "display", "redact", "redact_obj"]

REDACTED: Final = "[redacted]"

#: Secret shapes recognised by value, wherever they appear.
_VALUE_PATTERNS: Final = (
    re.compile(r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)"),  # user:pass@ in a URL
    re.compile(r"\bglpat-[0-9A-Za-z_\-]{20,}"),  # GitLab personal access token
    re.compile(r"\bgl(?:cbt|dt|ptt|rt|soat)-[0-9A-Za-z_\-]{20,}"),  # other GitLab tokens
    re.compile(r"\bgh[pousr]_[0-9A-Za-z]{30,}"),  # GitHub tokens
    re.compile(r"\bgithub_pat_[0-9A-Za-z_]{40,}"),
    re.compile(r"\bhf_[0-9A-Za-z]{30,}"),  # Hugging Face
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),  # AWS access key id
    re.compile(r"\bnvapi-[0-9A-Za-z_\-]{40,}"),  # NGC / NVIDIA API key
    re.compile(r"\b[0-9a-z]{26}:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"),
)
#: NAME=value / NAME: value where NAME is a variable named like a secret's (*PASSWD*, *TOKEN*,
#: *SECRET*, *KEY*: upper case, as environment variables are), or a flag such as --password=.
_NAMED: Final = re.compile(
    r"(?P<name>\b[A-Z0-9_]*(?:PASSWD|PASSWORD|TOKEN|SECRET|KEY)[A-Z0-9_]*\b"
    r"|(?<![A-Za-z0-9_])(?i:--?)?(?i:password|passwd|token|secret|api[_-]?key)\b)"
    r"(?P<sep>\s*[=:]\s*)(?P<quote>['\"]?)(?P<value>[^\s'\",;]+)"
)
_SECRET_NAME: Final = re.compile(r"PASSWD|PASSWORD|TOKEN|SECRET|KEY")


def redact(text: str) -> str:
    """`text` with every recognised secret value replaced by [redacted]."""
    if not text:
        return text
    for pattern in _VALUE_PATTERNS:
        text = pattern.sub(REDACTED, text)
    return _NAMED.sub(
        lambda m: (
            f"{m['name']}{m['sep']}{m['quote']}{REDACTED}" if m["value"] != REDACTED else m[0]
        ),
        text,
    )


def redact_obj(value: Any, *, key: str = "") -> Any:
    """A JSON-like value with every string redacted, and every value under a secret-like key."""
    if isinstance(value, str):
        secret_name = key.isupper() and _SECRET_NAME.search(key)  # an environment variable's
        return REDACTED if secret_name and value else redact(value)
    if isinstance(value, dict):
        return {k: redact_obj(v, key=str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_obj(v) for v in value]
    return value


def _escape(char: str) -> str:
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def display(text: str, *, keep_newlines: bool = True) -> str:
    """Printable text: control characters (ANSI escapes included), lone surrogates and other
    unencodable code points become visible escapes such as \\x1b and \\xff."""
    if text.isprintable():
        return text
    out = []
    for char in text:  # lone surrogates and control characters are not printable
        keep = char.isprintable() or (keep_newlines and char in "\n\t")
        out.append(char if keep else _escape(char))
    return "".join(out)


class SafeStream:
    """A text stream wrapper that writes `display(redact(text))`: the CLI's stdout and stderr."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(display(redact(text)))
        return len(text)

    def flush(self) -> None:
        # logging flushes a handler's old stream when it gets a new one; a stream that was
        # closed meanwhile (a finished test's capture, a closed pipe) has nothing left to flush
        with contextlib.suppress(ValueError):
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
