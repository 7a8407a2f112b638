"""SASL authentication, pure: tokens in, tokens out. No sockets, no clocks (time is passed in).

- `CredentialStore`: SCRAM credentials per user and mechanism (salt, StoredKey, ServerKey, iterations, as
  RFC 5802 defines them), never a password, kept in one JSON file replaced atomically.
- `ScramExchange` (RFC 5802/7677, through the `scramp` library) and `PlainExchange` (RFC 4616, checked against
  the same SCRAM credentials, so PLAIN needs no second copy of any secret).
- `FailedLoginThrottle`: how long to hold back the answer to a failed login from a host that keeps failing.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scramp import ScramException, ScramMechanism

from sluice.security.acl import read_store

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
SCRAM_MECHANISMS = (SCRAM_SHA_256, SCRAM_SHA_512)
MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)
# Kafka's ScramMechanism type codes (DescribeUserScramCredentials / AlterUserScramCredentials).
MECHANISM_CODES = {SCRAM_SHA_256: 1, SCRAM_SHA_512: 2}
MECHANISMS_BY_CODE = {code: name for name, code in MECHANISM_CODES.items()}
HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
# Kafka's bounds on SCRAM iterations (ScramMechanism.minIterations / maxIterations).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 8192
MAX_USER_NAME = 256
MAX_TOKEN_BYTES = 64 * 1024


class AuthenticationFailed(Exception):
    """The client's credentials were refused; the message goes back to the client, so it names no secret."""


class CredentialError(ValueError):
    """A credential that cannot be stored (bad name, mechanism or iterations)."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_json(self) -> dict[str, Any]:
        enc = base64.b64encode
        return {
            "salt": enc(self.salt).decode(),
            "stored_key": enc(self.stored_key).decode(),
            "server_key": enc(self.server_key).decode(),
            "iterations": self.iterations,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ScramCredential:
        dec = base64.b64decode
        return cls(dec(raw["salt"]), dec(raw["stored_key"]), dec(raw["server_key"]), int(raw["iterations"]))


def credential_from_salted_password(
    mechanism: str, salt: bytes, salted_password: bytes, iterations: int
) -> ScramCredential:
    """RFC 5802's StoredKey and ServerKey from SaltedPassword (what AlterUserScramCredentials carries)."""
    name = HASHES[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", name).digest()
    stored_key = hashlib.new(name, client_key).digest()
    server_key = hmac.new(salted_password, b"Server Key", name).digest()
    return ScramCredential(salt, stored_key, server_key, iterations)


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(HASHES[mechanism], password.encode(), salt, iterations)


def credential_from_password(
    mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    salt = salt if salt is not None else os.urandom(24)
    return credential_from_salted_password(
        mechanism, salt, salted_password(mechanism, password, salt, iterations), iterations
    )


def check_user_name(name: str) -> None:
    if not name:
        raise CredentialError("Username must not be empty")  # Kafka's ScramControlManager text
    if len(name) > MAX_USER_NAME:
        raise CredentialError(f"user name must have 1 to {MAX_USER_NAME} characters")
    if any(ord(c) < 32 for c in name):
        raise CredentialError("user name has control characters")


def check_iterations(mechanism: str, iterations: int) -> None:
    # Kafka's ScramControlManager texts.
    if mechanism not in SCRAM_MECHANISMS:
        raise CredentialError("Unknown SCRAM mechanism")
    if iterations < MIN_ITERATIONS:
        raise CredentialError("Too few iterations")
    if iterations > MAX_ITERATIONS:
        raise CredentialError("Too many iterations")


class CredentialStore:
    """user -> mechanism -> ScramCredential, durable in `path` (None keeps it in memory)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.users: dict[str, dict[str, ScramCredential]] = {}
        if path is not None and path.exists():
            read_store(path, self._load)

    def _load(self, raw: dict[str, Any]) -> None:
        for user, mechs in raw.get("users", {}).items():
            self.users[user] = {m: ScramCredential.from_json(c) for m, c in mechs.items()}

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.users.get(user, {}).get(mechanism)

    def upsert(self, user: str, mechanism: str, credential: ScramCredential, *, save: bool = True) -> None:
        check_user_name(user)
        check_iterations(mechanism, credential.iterations)
        self.users.setdefault(user, {})[mechanism] = credential
        if save:
            self.save()

    def delete(self, user: str, mechanism: str, *, save: bool = True) -> bool:
        mechs = self.users.get(user)
        if not mechs or mechanism not in mechs:
            return False
        del mechs[mechanism]
        if not mechs:
            del self.users[user]
        if save:
            self.save()
        return True

    def save(self) -> None:
        if self.path is None:
            return
        from sluice.storage.files import write_atomically

        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        data = {
            "version": 1,
            "users": {
                u: {m: c.to_json() for m, c in sorted(ms.items())} for u, ms in sorted(self.users.items())
            },
        }
        # Salted keys are not passwords, but they allow an offline guessing attack: owner only.
        write_atomically(self.path, json.dumps(data, indent=1).encode(), mode=0o600)

    def check_password(self, user: str, password: str) -> bool:
        """PLAIN: does the password reproduce the user's StoredKey for any of their SCRAM mechanisms?"""
        for mechanism, cred in sorted(self.users.get(user, {}).items()):
            candidate = credential_from_salted_password(
                mechanism,
                cred.salt,
                salted_password(mechanism, password, cred.salt, cred.iterations),
                cred.iterations,
            )
            return hmac.compare_digest(candidate.stored_key, cred.stored_key)
        return False


class SaslExchange:
    """One SASL authentication: feed client tokens to `step`; `principal` is set once `done`."""

    mechanism: str = ""
    done: bool = False
    principal: str | None = None

    def step(self, token: bytes) -> bytes:
        raise NotImplementedError


class PlainExchange(SaslExchange):
    mechanism = PLAIN

    def __init__(self, store: CredentialStore) -> None:
        self.store = store

    def step(self, token: bytes) -> bytes:
        if self.done:
            raise AuthenticationFailed("PLAIN takes one message")
        # Kafka's PlainSaslServer checks and words, in its order.
        parts = bytes(token).decode(errors="replace").split("\0", 3)
        if len(parts) != 3:
            raise AuthenticationFailed(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, user, password = parts
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        if not self.store.check_password(user, password):
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        self.done = True
        self.principal = f"User:{user}"
        return b""


def _unescape_sasl_name(name: str) -> str:
    # RFC 5802 saslname: ',' and '=' travel as =2C and =3D.
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramExchange(SaslExchange):
    def __init__(self, store: CredentialStore, mechanism: str) -> None:
        self.store = store
        self.mechanism = mechanism
        self.user: str | None = None
        self.refusal: str | None = None

        def auth_info(username: str) -> tuple[bytes, bytes, bytes, int]:
            user = _unescape_sasl_name(username)
            cred = store.get(user, mechanism)
            if cred is None:
                self.refusal = (
                    "Authentication failed during authentication due to invalid credentials with SASL mechanism "
                    f"{mechanism}"
                )
                raise AuthenticationFailed(self.refusal)
            self.user = user
            return cred.salt, cred.stored_key, cred.server_key, cred.iterations

        self._server = ScramMechanism(mechanism).make_server(auth_info)
        self._stage = 0

    def step(self, token: bytes) -> bytes:
        try:
            message = bytes(token).decode()
        except UnicodeDecodeError:
            raise AuthenticationFailed(
                f"Authentication failed during authentication due to invalid credentials with SASL mechanism "
                f"{self.mechanism}"
            ) from None
        try:
            if self._stage == 0:
                self._server.set_client_first(message)
                self._stage = 1
                return self._server.get_server_first().encode()
            if self._stage == 1:
                self._server.set_client_final(message)
                self._stage = 2
                self.done = True
                self.principal = f"User:{self.user}"
                return self._server.get_server_final().encode()
        except AuthenticationFailed:
            raise
        except ScramException as exc:
            # Kafka's ScramSaslServer throws a SaslException for an unknown user, a wrong proof or a malformed
            # message alike, and its authenticator answers all of them with one text.
            raise AuthenticationFailed(
                f"Authentication failed during authentication due to invalid credentials with SASL mechanism "
                f"{self.mechanism}"
            ) from exc
        raise AuthenticationFailed(f"{self.mechanism} exchange already finished")


def new_exchange(mechanism: str, store: CredentialStore) -> SaslExchange:
    if mechanism == PLAIN:
        return PlainExchange(store)
    return ScramExchange(store, mechanism)


class FailedLoginThrottle:
    """Per client host: each failed login within `window_ms` of the previous one doubles the delay before the
    failure is answered (Kafka's connection.failed.authentication.delay.ms, made progressive)."""

    MAX_HOSTS = 10_000

    def __init__(self, base_delay_ms: int = 100, max_delay_ms: int = 5_000, window_ms: int = 60_000) -> None:
        self.base_delay_ms = base_delay_ms
        self.max_delay_ms = max_delay_ms
        self.window_ms = window_ms
        self._failures: dict[str, tuple[int, int]] = {}  # host -> (count, last failure ms)

    def failed(self, host: str, now_ms: int) -> int:
        """Record a failure; returns how long to hold back its answer."""
        count, last = self._failures.get(host, (0, 0))
        count = count + 1 if now_ms - last <= self.window_ms else 1
        if len(self._failures) >= self.MAX_HOSTS and host not in self._failures:
            self._failures.clear()
        self._failures[host] = (count, now_ms)
        if self.base_delay_ms <= 0:
            return 0
        return min(self.max_delay_ms, self.base_delay_ms << min(count - 1, 20))

    def succeeded(self, host: str) -> None:
        self._failures.pop(host, None)
