"""Compact value encoding for everything ratchet keeps in Redis (one place, one format)."""

from __future__ import annotations

import json
from typing import Any


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def loads(raw: bytes | str | None) -> Any:
    return None if raw is None else json.loads(raw)
