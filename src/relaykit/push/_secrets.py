"""``SealedPushConfigStore``: push-notification credentials encrypted at rest, in front of any ``PushConfigStore``.

Invariants:

* What a webhook call carries (``token``, ``authentication.credentials``) is written to the inner store sealed
  (Fernet: AES-128-CBC + HMAC-SHA256, ``cryptography``), as ``sealed:v1:<token>``; nothing else changes, so every
  backend (memory, SQLite, PostgreSQL) stores ciphertext without knowing it.
* Reads unseal, so the owner of a config gets back exactly what it created (``GetTaskPushNotificationConfig`` returns
  the credentials, as the proto requires) and the sender gets what to send. A value stored before a key was configured
  (no ``sealed:`` prefix) is read as it is.
* Several keys rotate: the first seals, all of them unseal. A sealed value no key opens is an error, never a guess.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from relaykit._types import TaskPushNotificationConfig
from relaykit.backends._base import PushConfigStore

__all__ = ["SealedPushConfigStore", "new_secrets_key"]

_PREFIX = "sealed:v1:"


def _fernet(keys: Sequence[bytes | str]) -> Any:
    try:
        from cryptography.fernet import Fernet, MultiFernet
    except ImportError as exc:  # pragma: no cover - depends on extras
        raise ImportError("sealing push credentials needs cryptography: pip install 'relaykit[signing]'") from exc
    if not keys:
        raise ValueError("give at least one push secrets key")
    try:
        return MultiFernet([Fernet(k.strip() if isinstance(k, bytes) else k.strip().encode()) for k in keys])
    except ValueError as exc:
        raise ValueError(
            f"a push secrets key must be 32 url-safe base64-encoded bytes (new_secrets_key()): {exc}"
        ) from None


def new_secrets_key() -> str:
    """A fresh key for ``push_secrets_key`` / ``--push-secrets-key``."""
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode("ascii")


class SealedPushConfigStore:
    """Seals credentials on the way into ``store`` and unseals them on the way out (see the module docstring).

    >>> # store = SealedPushConfigStore(open_push_store("sqlite:///relaykit.db"), [new_secrets_key()])
    """

    def __init__(self, store: PushConfigStore, keys: Sequence[bytes | str] | bytes | str) -> None:
        self.store = store
        self._fernet = _fernet([keys] if isinstance(keys, bytes | str) else list(keys))

    def _seal(self, value: str) -> str:
        if not value:
            return value
        return _PREFIX + str(self._fernet.encrypt(value.encode()).decode("ascii"))

    def _unseal(self, value: str) -> str:
        if not value.startswith(_PREFIX):
            return value
        from cryptography.fernet import InvalidToken

        try:
            return self._fernet.decrypt(value[len(_PREFIX) :].encode("ascii")).decode()  # type: ignore[no-any-return]
        except InvalidToken:
            raise ValueError("a stored push credential cannot be unsealed with the configured key(s)") from None

    def seal(self, config: TaskPushNotificationConfig) -> TaskPushNotificationConfig:
        """The config as stored: credentials sealed."""
        update: dict[str, Any] = {"token": self._seal(config.token)}
        if config.authentication is not None:
            update["authentication"] = config.authentication.model_copy(
                update={"credentials": self._seal(config.authentication.credentials)}
            )
        return config.model_copy(update=update)

    def unseal(self, config: TaskPushNotificationConfig) -> TaskPushNotificationConfig:
        """The config as created: credentials in the clear."""
        update: dict[str, Any] = {"token": self._unseal(config.token)}
        if config.authentication is not None:
            update["authentication"] = config.authentication.model_copy(
                update={"credentials": self._unseal(config.authentication.credentials)}
            )
        return config.model_copy(update=update)

    async def start(self) -> None:
        """Start the inner store."""
        await self.store.start()

    async def close(self) -> None:
        """Close the inner store."""
        await self.store.close()

    async def put(self, config: TaskPushNotificationConfig, *, owner: str = "anonymous") -> None:
        """Store ``config`` with its credentials sealed."""
        await self.store.put(self.seal(config), owner=owner)

    async def get(
        self, task_id: str, config_id: str, *, tenant: str = "", owner: str = "anonymous"
    ) -> TaskPushNotificationConfig | None:
        """One config, unsealed."""
        config = await self.store.get(task_id, config_id, tenant=tenant, owner=owner)
        return self.unseal(config) if config is not None else None

    async def list(
        self, task_id: str, *, tenant: str = "", owner: str = "anonymous"
    ) -> list[TaskPushNotificationConfig]:
        """A task's configs, unsealed."""
        return [self.unseal(c) for c in await self.store.list(task_id, tenant=tenant, owner=owner)]

    async def delete(self, task_id: str, config_id: str, *, tenant: str = "", owner: str = "anonymous") -> bool:
        """Remove one config."""
        return await self.store.delete(task_id, config_id, tenant=tenant, owner=owner)

    def __getattr__(self, name: str) -> Any:
        # Anything else a backend offers (ping, a shared connection) is the inner store's.
        return getattr(self.store, name)
