"""Secrets out of everything written: config data, URLs and log records.

What is written to disk, the store and logs never carries a secret: secret-named fields and
URL passwords become ***, and a log filter blanks the secret values it has been told about.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Iterable
from typing import Any

# --- secrets: what is written to disk, the store and logs never carries them ---------------
REDACTED = "***"
# a key is secret when its last word is one of these (api_key, hf_token, client_secret, ...),
# but not a tokenizer's special tokens (pad_token: "<pad>") or counts (max_tokens)
_SECRET_KEY = re.compile(r"(^|[_-])(api[_-]?key|apikey|password|passwd|secret|token|credentials?)$", re.I)
_NOT_SECRET = re.compile(r"^(pad|eos|bos|unk|sep|cls|mask)_token$", re.I)
_URL_PASSWORD = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:/@\s]*):(?P<pw>[^@/\s]+)@")


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(key)) and not _NOT_SECRET.match(key)


def redact_url(value: str) -> str:
    """Every `scheme://user:password@` in `value` with the password replaced by ***."""
    return _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", value)


_KEY_SEP = re.compile(r"(?P<key>[\w-]+)\s*[=:]\s*|(?P<flag>--[\w.-]+)\s+")  # key=value, key: value, --flag value
_VALUE = re.compile(r"""'[^']*'|"[^"]*"|[^\s,}\]]+""")


def redact_text(text: str) -> str:
    """Free text with the values of secret-named `key=value` / `key: value` pairs (dotted or
    flag-like keys too: `--sampler.engine_kwargs.api_key=...`, `--api-key VALUE`) and URL
    passwords replaced by ***: for what echoes a command line back, such as argparse's
    "unrecognized arguments"."""
    out, pos = [], 0
    for m in _KEY_SEP.finditer(text):
        value = _VALUE.match(text, m.end())
        key = (m["key"] or m["flag"]).rsplit(".", 1)[-1].lstrip("-")
        if m.start() < pos or not value or not is_secret_key(key):
            continue
        out.append(text[pos:m.end()] + REDACTED)
        pos = value.end()
    return redact_url("".join(out) + text[pos:])


def redact_secrets(data: Any) -> Any:
    """A copy of plain config data with secret-named fields and URL passwords replaced by ***.

    Empty/None secrets stay as they are (nothing to hide, and "no key" stays visible).
    """
    if isinstance(data, dict):
        return {k: (REDACTED if isinstance(k, str) and is_secret_key(k) and v not in (None, "")
                    else redact_secrets(v)) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return type(data)(redact_secrets(v) for v in data)
    if isinstance(data, str):
        return redact_url(data)
    return data


def secret_values(data: Any) -> set[str]:
    """The secret strings inside config data (secret-named fields, URL passwords), for log filters."""
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        data = dataclasses.asdict(data)  # a config: its plain data (common.config.to_dict)
    found: set[str] = set()
    if isinstance(data, dict):
        for k, v in data.items():
            if isinstance(k, str) and is_secret_key(k) and isinstance(v, str | int) and str(v):
                found.add(str(v))
            else:
                found |= secret_values(v)
    elif isinstance(data, list | tuple):
        for v in data:
            found |= secret_values(v)
    elif isinstance(data, str):
        found |= {m["pw"] for m in _URL_PASSWORD.finditer(data)}
    return found


class RedactingFilter(logging.Filter):
    """Replaces known secret values and URL passwords in every log record it sees.

    Installed on every root handler of every process by common.logs, so a library that logs
    a URL or an engine's kwargs never writes the secret into a job's log.
    """

    def __init__(self, secrets: Iterable[str] = ()):
        super().__init__()
        self.secrets: list[str] = []
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        """Blank these too (longest first, so a secret containing another is blanked whole)."""
        self.secrets = sorted({*self.secrets, *(s for s in secrets if len(s) >= 4)}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        for s in self.secrets:
            text = text.replace(s, REDACTED)
        return redact_url(text)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = self.redact(message)
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if clean != message:
            record.msg, record.args = clean, None
        return True
