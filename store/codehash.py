"""Normalized code hashes: the identity of a program in the archive and the execution cache.

Two programs that differ only in comments, blank lines or formatting get the same hash,
so a model that rewrites the same program is executed and archived once.
"""

from __future__ import annotations

import ast
import hashlib
import warnings

HASH_CHARS = 20  # 80 bits: collisions are negligible at billions of programs


def normalize_code(code: str) -> str:
    """Canonical source: parsed and unparsed when it parses, else whitespace-trimmed lines."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            return ast.unparse(ast.parse(code))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        lines = (line.rstrip() for line in code.strip().splitlines())
        return "\n".join(line for line in lines if line)


def code_hash(code: str) -> str:
    return hashlib.sha256(normalize_code(code).encode()).hexdigest()[:HASH_CHARS]


def content_hash(payload: bytes | str) -> str:
    """A short stable hash of arbitrary content (task fingerprints, corpus hashes)."""
    data = payload.encode() if isinstance(payload, str) else payload
    return hashlib.sha256(data).hexdigest()[:HASH_CHARS]
