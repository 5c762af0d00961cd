"""Secrets at rest: Fernet (AES-128-CBC + HMAC-SHA256) with a key in the server home.

The key file (``$GPUDOCK_HOME/secrets.key``) is made on first use (the
server makes it at start), mode 0600, by whichever thread or process links
it into place first; later uses read it. The
database then holds only ciphertext: a copy of it without the key reveals no
password. Losing the key loses the stored secrets (users log in again); it
never loses anything else.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

KEY_FILE = "secrets.key"


class VaultError(Exception):
    """A stored secret cannot be decrypted (the key changed or the text is damaged)."""


class Vault:
    """Encrypt and decrypt short secrets with the key in ``path`` (made on first use)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fernet: Fernet | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Vault({str(self.path)!r})"

    def encrypt(self, secret: str) -> str:
        return self._key().encrypt(secret.encode()).decode("ascii")

    def decrypt(self, token: str) -> str:
        """The secret, or ``VaultError`` (never the token's text in its message)."""
        try:
            return self._key().decrypt(token.encode("ascii")).decode()
        except (InvalidToken, UnicodeError):
            raise VaultError(f"a secret cannot be decrypted with the key in {self.path}") from None

    def ensure_key(self) -> None:
        """Make the key file now if there is none (the server's start, before its workers)."""
        self._key()

    def _key(self) -> Fernet:
        with self._lock:
            if self._fernet is None:
                self._fernet = Fernet(_read_or_make_key(self.path))
            return self._fernet


def _read_or_make_key(path: Path) -> bytes:
    """The key in ``path``, made first if there is none. A new key is written whole to a
    file of this thread's own and linked into place, so a reader (another thread or
    process) never sees a partial key, and when two make one, the first link wins."""
    try:
        return path.read_bytes().strip()
    except FileNotFoundError:
        pass
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(Fernet.generate_key() + b"\n")
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass  # another made it first: use theirs
    finally:
        tmp.unlink()
    return path.read_bytes().strip()
