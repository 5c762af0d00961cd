"""Registry logins: users store their own; launches pick the login for each pull.

Rules:

* everyone manages only their own logins (``PUT``/``GET``/``DELETE
  /v1/registries``), admins included: another user's login is never listed,
  replaced or removed, and is never used for anyone else's pull;
* a stored password is encrypted with the server's key (``gpudock.vault``) and
  never leaves the server: answers carry registry, username and when;
* a registry is ``host[:port]`` (``core/registries.check_registry``);
  anything else is ``InvalidInput`` (422) with one line.

At launch, ``pull_login`` picks the job owner's own login to the image's
registry, else the server config's; and a registry with any login (stored or
configured) is private, so its images are pulled at every launch, even when
the engine has them, with the owner's login: a user without access cannot run
a copy another user pulled.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from pydantic import SecretStr
from sqlalchemy.orm import Session

from gpudock.core.errors import Conflict, InvalidInput, NotFound
from gpudock.core.registries import RegistryLogin, check_registry, registry_of
from gpudock.runtime.context import RuntimeContext
from gpudock.store import registries as registry_store
from gpudock.store.registries import StoredLogin
from gpudock.store.tokens import Principal
from gpudock.vault import Vault, VaultError

log = logging.getLogger("gpudock.registries")

USERNAME_PATTERN = r"^[^\x00-\x1f\x7f]{1,255}$"
"""A registry username: 1-255 characters, none of them control characters."""
_USERNAME = re.compile(USERNAME_PATTERN)
MAX_PASSWORD_LENGTH = 4096


def valid_registry(value: str) -> str:
    """``check_registry`` as ``InvalidInput`` on the field ``registry``."""
    try:
        return check_registry(value)
    except ValueError as exc:
        raise InvalidInput(str(exc), field="registry") from None


@dataclass(frozen=True, slots=True)
class PullPlan:
    """How a launch pulls its image: with ``login`` (None: anonymously), and
    whether even a cached image is pulled again (``always``: the registry is private)."""

    login: RegistryLogin | None
    always: bool


class RegistryService:
    def __init__(self, ctx: RuntimeContext) -> None:
        self.ctx = ctx

    def login(
        self, principal: Principal, registry: str, username: str, password: SecretStr
    ) -> StoredLogin:
        """Store (or replace) the caller's login to ``registry``."""
        name = valid_registry(registry)
        if not _USERNAME.fullmatch(username):
            raise InvalidInput(
                "username must be 1-255 characters without control characters", field="username"
            )
        secret = password.get_secret_value()
        if not secret or len(secret) > MAX_PASSWORD_LENGTH:
            raise InvalidInput(
                f"password must be 1-{MAX_PASSWORD_LENGTH} characters", field="password"
            )
        sealed = self._vault().encrypt(secret)
        with self.ctx.db.write() as session:
            stored = registry_store.put(
                session, principal.user, name, username, sealed, self.ctx.clock()
            )
        log.info("user %s stored a login to registry %s", principal.user, name)
        return stored

    def list(self, principal: Principal) -> list[StoredLogin]:
        """The caller's own logins, by registry."""
        with self.ctx.db.read() as session:
            return registry_store.list_for(session, principal.user)

    def logout(self, principal: Principal, registry: str) -> StoredLogin:
        """Remove the caller's login to ``registry``; ``NotFound`` if there is none."""
        name = valid_registry(registry)
        with self.ctx.db.write() as session:
            stored = registry_store.find(session, principal.user, name)
            if stored is None or not registry_store.remove(session, principal.user, name):
                raise NotFound(f"you have no login to registry {name}")
        log.info("user %s removed their login to registry %s", principal.user, name)
        return stored

    def _vault(self) -> Vault:
        if self.ctx.vault is None:
            raise Conflict("this server keeps no secrets (it was started without a home)")
        return self.ctx.vault


def pull_login(ctx: RuntimeContext, session: Session, user: str, image: str) -> PullPlan:
    """The login ``user``'s job pulls ``image`` with: their own, else the server's.

    A stored login that cannot be decrypted (the key file changed) is skipped
    with a WARNING naming user and registry, never the secret.
    """
    registry = registry_of(image)
    configured = ctx.config.executor.registries.get(registry)
    stored = registry_store.find(session, user, registry)
    if stored is not None and ctx.vault is not None:
        try:
            password = SecretStr(ctx.vault.decrypt(stored.secret))
        except VaultError as exc:
            log.warning("user %s's login to registry %s is ignored: %s", user, registry, exc)
        else:
            return PullPlan(
                RegistryLogin(registry, stored.username, f"user {user}", password), True
            )
    private = configured is not None or registry_store.anyone_logged_in(session, registry)
    return PullPlan(None if configured is None else configured.login(registry), private)
