"""Tokens: random, stored only as hashes, compared in constant time.

Tokens carry 256 bits from :func:`secrets.token_urlsafe`, so a plain SHA-256 is a sound way to store
them (no dictionary to attack; a slow password hash would only add latency to every request). The
ledger is looked up by the hash, and the hash is then compared again with :func:`hmac.compare_digest`.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import threading
import time

from overlapdp.errors import AuthError as AuthError
from overlapdp.service.ledger.base import AnalystRecord

#: Environment variable holding the admin token (otherwise one is generated and printed once).
ADMIN_TOKEN_ENV = "OVERLAPDP_ADMIN_TOKEN"
TOKEN_PREFIX = "odp_"


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def same_hash(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("ascii", "replace"), b.encode("ascii", "replace"))


class AdminKey:
    """The admin token's hash; the token itself is never kept."""

    def __init__(self, token: str) -> None:
        if len(token) < 16:
            raise AuthError(f"the admin token (${ADMIN_TOKEN_ENV}) must have at least 16 characters")
        self._hash = hash_token(token)

    @staticmethod
    def from_env() -> tuple[AdminKey, str | None]:
        """The admin key from ``$OVERLAPDP_ADMIN_TOKEN``, or a fresh one and its token (to print once)."""
        token = os.environ.get(ADMIN_TOKEN_ENV)
        if token:
            return AdminKey(token), None
        token = new_token()
        return AdminKey(token), token

    def check(self, token: str | None) -> None:
        if not token or not same_hash(hash_token(token), self._hash):
            raise AuthError("a valid admin token is required")


class TokenCache:
    """A short-lived map from token hash to the analyst's record, so that not every request reads the ledger.

    A revocation in this process drops the entry at once; one made by another service instance is seen
    within ``ttl`` seconds by reads, and at once by admission, which re-reads the analyst in its
    transaction (no charge is ever admitted for a revoked analyst).
    """

    def __init__(self, ttl: float = 2.0) -> None:
        self.ttl = ttl
        self._entries: dict[str, tuple[AnalystRecord, float]] = {}
        self._lock = threading.Lock()

    def get(self, token_hash: str) -> AnalystRecord | None:
        with self._lock:
            hit = self._entries.get(token_hash)
        if hit is None or hit[1] < time.monotonic():
            return None
        return hit[0]

    def put(self, token_hash: str, analyst: AnalystRecord) -> None:
        with self._lock:
            if len(self._entries) > 10_000:
                self._entries.clear()
            self._entries[token_hash] = (analyst, time.monotonic() + self.ttl)

    def drop_analyst(self, analyst: str) -> None:
        with self._lock:
            for key in [k for k, (rec, _) in self._entries.items() if rec.name == analyst]:
                del self._entries[key]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
