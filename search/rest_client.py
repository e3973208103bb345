"""A client of this project's REST API for the faces on the same machine: the owner's address and
local token (search/owner.py), JSON in and out, errors back as the ServiceErrors they were.

The standard library's HTTP client, not httpx: the CLI's fast path pays for every import on each
`search "…"`.
"""

from __future__ import annotations

import json
import mimetypes
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from search import errors
from search.owner import Owner, find

AUTH_HEADER = "X-API-Key"
# A server records itself as the owner once its store is open, and listens a moment later (its
# start-up): a refused connection to a live owner within this long is waited out, not an error.
STARTING_WAIT_S = 20.0


class RestClient:
    def __init__(self, owner: Owner, timeout_s: float = 600.0, starting_wait_s: float = STARTING_WAIT_S) -> None:
        self.owner, self.timeout_s, self.starting_wait_s = owner, timeout_s, starting_wait_s

    def call(self, method: str, path: str, body: dict | None = None, *, form: dict | None = None,
             upload: tuple[str, tuple[str, bytes]] | None = None) -> dict:
        headers = {AUTH_HEADER: self.owner.token, "Accept": "application/json"}
        data = None
        if upload is not None or form is not None:
            data, content_type = _multipart(form or {}, upload)
            headers["Content-Type"] = content_type
        elif body is not None:
            data = json.dumps({k: v for k, v in body.items() if v is not None}).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.owner.url + path, data=data, method=method, headers=headers)
        deadline = time.monotonic() + self.starting_wait_s
        while True:
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    return json.loads(response.read() or b"{}")
            except urllib.error.HTTPError as exc:
                raise _error(exc.code, exc.read()) from None
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                # Refused: nothing was sent, so asking again is safe, even for a POST.
                if isinstance(reason, ConnectionRefusedError) and self._still_owner() and time.monotonic() < deadline:
                    time.sleep(0.1)
                    continue
                raise errors.StoreUnavailable(
                    f"the search server that owns this data dir ({self.owner.describe()}) does not answer "
                    f"({reason}): stop it, or wait until it has started") from None

    def _still_owner(self) -> bool:
        """The server is alive and still recorded (one that is shutting down has given the record back)."""
        return find(Path(self.owner.data_dir)) == self.owner




def _multipart(fields: dict, upload: tuple[str, tuple[str, bytes]] | None) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    parts = []
    for name, value in fields.items():
        for item in value if isinstance(value, list | tuple) else [value]:  # a list: the field repeated, as forms send it
            if item is not None:
                parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{item}\r\n'.encode())
    if upload is not None:
        name, (filename, content) = upload
        kind = mimetypes.guess_type(filename)[0] or "application/octet-stream"
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
                     f"Content-Type: {kind}\r\n\r\n".encode() + content + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


# The error kinds the API names in its error body, and what a bare status code means.
def _kinds(cls: type) -> dict[str, type]:
    return {cls.__name__: cls} | {k: v for sub in cls.__subclasses__() for k, v in _kinds(sub).items()}


_KINDS = _kinds(errors.ServiceError)
_BY_STATUS = {400: errors.BadRequest, 404: errors.BadRequest, 409: errors.EmptyCollection, 413: errors.BadRequest,
              422: errors.BadRequest, 503: errors.TritonUnavailable, 504: errors.TritonTimeout}


def _error(status: int, raw: bytes) -> errors.ServiceError:
    try:
        body = json.loads(raw)
    except ValueError:
        body = {}
    detail = body.get("detail") if isinstance(body, dict) else None
    cls = _KINDS.get(body.get("error", "") if isinstance(body, dict) else "") or _BY_STATUS.get(status, errors.ServiceError)
    return cls(str(detail or f"the search server answered HTTP {status}"))
