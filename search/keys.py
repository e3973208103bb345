"""API keys scoped to knowledge bases and rights, kept in a file in the data dir.

A key has a name, its knowledge bases (``*``: all) and one right: ``read``, ``write`` (and ingest)
or ``admin`` (and delete its knowledge bases). The secret is shown once; the file keeps its salted
SHA-256 (256 random bits need no slow hash) and a checksum that finds hand edits or damage, not
attackers who can write the data dir. The settings' ``api_key`` remains a key with every right on
every KB."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from search.errors import BadRequest, NotFound, ServiceError
from search.store.schema import check_kb

KEYS_FILE = "api-keys.json"  # in the data dir
RIGHTS = ("read", "write", "admin")
ALL_KBS = "*"
_VERSION = 1
_PREFIX = "sk-"


class KbRefused(ServiceError):
    """A key asked for a knowledge base it has no such right on (REST: 403; MCP: the tool's error)."""

    exit_code = 2


class KeysFileError(ServiceError):
    """The keys file is missing (when configured), unreadable or fails its checksum."""

    exit_code = 5


@dataclass(frozen=True)
class ApiKey:
    name: str
    kbs: tuple[str, ...]  # ("*",): every knowledge base
    right: str
    salt: str
    digest: str
    created: float

    def listed(self) -> dict:
        """What `search keys list` shows: never the digest."""
        return {"name": self.name, "kbs": list(self.kbs), "right": self.right, "created": self.created}


@dataclass(frozen=True)
class Principal:
    """Who a request acts as: the knowledge bases it may use (None: all) and its right."""

    name: str
    kbs: frozenset[str] | None
    right: str

    @property
    def everything(self) -> bool:
        """The settings' API key, the owner's local token, or a server without keys."""
        return self.kbs is None and self.right == "admin"

    def may(self, kb: str, right: str = "read") -> bool:
        return (self.kbs is None or kb in self.kbs) and RIGHTS.index(self.right) >= RIGHTS.index(right)

    def visible(self, kbs: list[str]) -> list[str]:
        return [kb for kb in kbs if self.may(kb)]

    def readable(self, known: Callable[[], list[str]]) -> list[str] | None:
        """The knowledge bases among ``known()`` this key may read (None: every one, without asking)."""
        return None if self.kbs is None else self.visible(known())

    def need(self, kb: str, right: str = "read") -> str:
        """``kb`` if this key has ``right`` on it; else KbRefused, whose message every face shows."""
        if not self.may(kb, right):
            verb = {"read": "search", "write": "write to", "admin": "administer"}[right]
            raise KbRefused(f"kb: this API key may not {verb} knowledge base {kb!r}")
        return kb


EVERYTHING = Principal("admin", None, "admin")


def _digest(salt: str, secret: str) -> str:
    return hashlib.sha256(f"{salt}:{secret}".encode()).hexdigest()


def _checksum(keys: list[dict]) -> str:
    return hashlib.sha256(json.dumps(keys, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class KeyFile:
    """The keys file. ``required``: its place was configured, so a missing file is an error (not
    "no keys yet"). Reads follow changes made by `search keys` while a server runs. A file that exists,
    even with no key left in it, means keys are required (``exists``): revoking the last key must not
    open the server to everyone."""

    def __init__(self, path: Path, *, required: bool = False) -> None:
        self.path, self.required = Path(path), required
        self._seen: tuple[int, int] | None = None
        self._keys: list[ApiKey] = []
        self.exists = False  # as the last load found it
        self._existed = False  # once seen, a file that goes away is an error, not "no keys"

    def load(self) -> list[ApiKey]:
        """The keys, read again when the file changed; KeysFileError (one line) when it is missing
        though required or though it was there before, unreadable, or fails its checksum."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self.exists = False
            if self.required:
                raise KeysFileError(f"API keys file {self.path} is missing (configured by SEARCH_API_KEYS_FILE): "
                                    "restore it, or create it with `search keys add`") from None
            if self._existed:
                raise KeysFileError(f"API keys file {self.path} was removed while the server runs: restore it "
                                    "(only a server started without it, and without an API key, is open to everyone)") from None
            self._seen, self._keys = None, []
            return []
        self.exists = self._existed = True
        if self._seen == (st.st_mtime_ns, st.st_size):
            return self._keys
        self._keys = self._parse()
        self._seen = (st.st_mtime_ns, st.st_size)
        return self._keys

    def _parse(self) -> list[ApiKey]:
        where = f"API keys file {self.path}"
        try:
            data = json.loads(self.path.read_text())
        except OSError as exc:
            raise KeysFileError(f"{where} cannot be read: {exc.strerror}") from None
        except ValueError:
            raise KeysFileError(f"{where} is not valid JSON (damaged or edited by hand): restore it from a backup, "
                                "or delete it and make the keys again with `search keys add`") from None
        if not isinstance(data, dict) or data.get("version") != _VERSION or not isinstance(data.get("keys"), list):
            raise KeysFileError(f"{where} is not a keys file of this version")
        if not hmac.compare_digest(str(data.get("checksum", "")), _checksum(data["keys"])):
            raise KeysFileError(f"{where} fails its checksum (edited by hand or damaged): restore it from a backup, "
                                "or delete it and make the keys again with `search keys add`")
        try:
            keys = [ApiKey(k["name"], tuple(k["kbs"]), k["right"], k["salt"], k["digest"], float(k["created"]))
                    for k in data["keys"]]
        except (KeyError, TypeError, ValueError):
            raise KeysFileError(f"{where} has a key without all its fields") from None
        if any(k.right not in RIGHTS for k in keys):
            raise KeysFileError(f"{where} has a key with an unknown right")
        return keys

    def _save(self, keys: list[ApiKey]) -> None:
        body = [asdict(k) | {"kbs": list(k.kbs)} for k in keys]
        text = json.dumps({"version": _VERSION, "keys": body, "checksum": _checksum(body)}, indent=2)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # the digests are nobody else's business
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)  # whole or not at all
        self._seen = None
        self.exists = self._existed = True

    def add(self, name: str, kbs: list[str], right: str) -> str:
        """Make a key; returns its secret, which is not kept anywhere."""
        if not name or len(name) > 64 or not all(c.isalnum() or c in "-_." for c in name):
            raise BadRequest(f"name: 1-64 letters, digits, '-', '_' or '.', got {name!r}")
        if right not in RIGHTS:
            raise BadRequest(f"right: must be one of {', '.join(RIGHTS)}, got {right!r}")
        if not kbs:
            raise BadRequest("kb: give the knowledge bases the key may use (--kb NAME, repeatable; '*' for all)")
        for kb in kbs:  # the API's rule: a key for a KB that cannot exist is a typo
            if kb != ALL_KBS:
                try:
                    check_kb(kb)
                except ValueError as exc:
                    raise BadRequest(str(exc)) from None
        keys = self.load()
        if any(k.name == name for k in keys):
            raise BadRequest(f"name: a key named {name!r} exists (revoke it first)")
        secret = _PREFIX + secrets.token_urlsafe(32)
        salt = secrets.token_hex(16)
        self._save([*keys, ApiKey(name, tuple(dict.fromkeys(kbs)), right, salt, _digest(salt, secret), time.time())])
        return secret

    def revoke(self, name: str) -> ApiKey:
        keys = self.load()
        gone = next((k for k in keys if k.name == name), None)
        if gone is None:
            raise NotFound(f"name: no API key named {name!r}")
        self._save([k for k in keys if k.name != name])
        return gone

    def match(self, secret: str) -> Principal | None:
        """The principal of a presented secret, or None. Every key is compared (in constant time)."""
        found = None
        for k in self.load():
            if hmac.compare_digest(_digest(k.salt, secret), k.digest):
                found = k
        if found is None:
            return None
        return Principal(found.name, None if ALL_KBS in found.kbs else frozenset(found.kbs), found.right)


def key_file(settings) -> KeyFile:
    """The keys file of these settings: SEARCH_API_KEYS_FILE (then required), else <data dir>/api-keys.json."""
    configured = settings.api_keys_file
    return KeyFile(Path(configured) if configured else settings.data_dir / KEYS_FILE, required=bool(configured))
