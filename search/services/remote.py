"""The query services through the running `search serve` that owns the store (see search/owner.py).

Same methods, same hits, same errors as ``SearchService``, so a face does not care which one it
holds. The standard library's HTTP client, not httpx: this is the CLI's fast path, and every
import there is paid on each `search "…"`.
"""

from __future__ import annotations

import json
import mimetypes
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from search import errors
from search.owner import Owner
from search.services.options import ImageFilters
from search.services.results import DocumentHit, ImageHit, Verdict

AUTH_HEADER = "X-API-Key"


class RemoteService:
    """A client of the owner's REST API, authenticated with the owner's local token."""

    def __init__(self, owner: Owner, timeout_s: float = 600.0) -> None:
        self.owner, self.timeout_s = owner, timeout_s

    def close(self) -> None:
        pass

    # -- queries
    def search_documents(self, query: str, *, top_k: int = 5, min_score: float | None = None,
                         folder: str | None = None, mode: str | None = None, suffixes=()) -> list[DocumentHit]:
        body = {"query": query, "top_k": top_k, "min_score": min_score, "folder": folder, "mode": mode,
                "types": list(suffixes) or None}
        return [_hit(DocumentHit, h) for h in self.call("POST", "/search/documents", body)["hits"]]

    def search_images(self, text: str | None = None, *, like: Path | bytes | None = None, top_k: int = 12,
                      min_score: float | None = None, filters: ImageFilters = ImageFilters(), sort: str = "score",
                      verify: bool = False, min_entailment: float | None = None) -> list[ImageHit]:
        fields = {k: v for k, v in filters.as_fields().items() if v is not None}
        if like is None:
            body = {"text": text, "top_k": top_k, "min_score": min_score, "sort": sort, "verify": verify,
                    "min_entailment": min_entailment, **fields}
            return [_hit(ImageHit, h) for h in self.call("POST", "/search/images", body)["hits"]]
        form = {"top_k": top_k, "min_score": min_score, "sort": sort, **fields}
        answer = self.call("POST", "/search/images/like", form=form, upload=("image", _image(like, "like")))
        return [_hit(ImageHit, h) for h in answer["hits"]]

    def entail(self, image: Path | str | bytes, hypothesis: str, premise: str | None = None) -> Verdict:
        form = {"hypothesis": hypothesis, "premise": premise}
        return _hit(Verdict, self.call("POST", "/entail", form=form, upload=("image", _image(image, "image"))))

    def status(self) -> dict:
        return self.call("GET", "/status")

    def store_stats(self) -> dict:
        return self.call("GET", "/store/stats")

    def optimize_store(self) -> None:
        self.call("POST", "/store/optimize")

    # -- transport
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
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            raise _error(exc.code, exc.read()) from None
        except (urllib.error.URLError, OSError) as exc:
            raise errors.StoreUnavailable(
                f"the search server that owns this data dir ({self.owner.describe()}) does not answer "
                f"({getattr(exc, 'reason', exc)}): stop it, or wait until it has started") from None


def _hit(cls, data: dict):
    names = cls.__dataclass_fields__
    return cls(**{k: v for k, v in data.items() if k in names})


def _image(value: Path | str | bytes, field: str) -> tuple[str, bytes]:
    if isinstance(value, bytes):
        return "upload", value
    path = Path(value).expanduser()
    try:
        return path.name, path.read_bytes()
    except FileNotFoundError:
        raise errors.BadRequest(f"{field}: {path}: no such file") from None
    except IsADirectoryError:
        raise errors.BadRequest(f"{field}: {path}: is a directory, not an image") from None
    except OSError as exc:
        raise errors.BadRequest(f"{field}: {path}: cannot be read ({exc.strerror or exc})") from None


def _multipart(fields: dict, upload: tuple[str, tuple[str, bytes]] | None) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    parts = []
    for name, value in fields.items():
        if value is None:
            continue
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
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
              422: errors.BadRequest, 503: errors.TritonUnavailable}


def _error(status: int, raw: bytes) -> errors.ServiceError:
    try:
        body = json.loads(raw)
    except ValueError:
        body = {}
    detail = body.get("detail") if isinstance(body, dict) else None
    cls = _KINDS.get(body.get("error", "") if isinstance(body, dict) else "") or _BY_STATUS.get(status, errors.ServiceError)
    return cls(str(detail or f"the search server answered HTTP {status}"))
