"""What OpenAI-compatible clients send and get back under /v1 (embeddings, models), errors included:
there every error is ``{"error": {"message", "type", "param", "code"}}``, the body the official
clients (and LangChain, LlamaIndex...) parse, instead of the project's ``{"detail"}``."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from search.services.embeddings import MAX_INPUTS, MAX_REQUEST_CHARS, MODELS

PREFIX = "/v1/"

# status -> (OpenAI's error type, the code when the status says it all)
_KINDS = {400: ("invalid_request_error", None), 401: ("invalid_request_error", "invalid_api_key"),
          403: ("invalid_request_error", "forbidden"), 404: ("invalid_request_error", "model_not_found"),
          409: ("invalid_request_error", None), 413: ("invalid_request_error", "request_too_large"),
          422: ("invalid_request_error", None), 503: ("server_error", "model_not_ready"),
          504: ("server_error", "timeout")}


def is_openai(path: str) -> bool:
    return path.startswith(PREFIX)


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    kind, default_code = _KINDS.get(status, ("server_error" if status >= 500 else "invalid_request_error", None))
    return {"error": {"message": message, "type": kind, "param": param, "code": code or default_code}}


class OpenAIErrorDetail(BaseModel):
    message: str = Field(description="one line; it starts with the field at fault when there is one")
    type: str = Field(description="invalid_request_error or server_error")
    param: str | None = Field(description="the request field at fault, if any")
    code: str | None = Field(description="e.g. model_not_found, invalid_api_key, model_not_ready")


class OpenAIError(BaseModel):
    error: OpenAIErrorDetail


_ERRORS = {
    400: "Invalid input (empty, too many inputs or characters, token arrays, a bad image, unsupported dimensions): "
         "the message names the field",
    401: "The API key is missing or wrong (send it as 'Authorization: Bearer KEY' or X-API-Key)",
    404: "No such model",
    413: "The request body is over the server's size limit",
    500: "An unexpected error; the server log has the details",
    503: "The model is not served now, or Triton is not reachable (with Retry-After)",
    504: "Triton is there but did not answer in time, retries included (busy): try again later",
    "4XX": "Any other client error (a request that does not match this schema is a 400 here, never a 422)",
}
_AUTH_HEADER = {"WWW-Authenticate": {"description": "the scheme to authenticate with", "required": True,
                                     "schema": {"type": "string"}}}


def errors(*codes: int | str) -> dict[int | str, dict]:
    """The ``responses=`` of a /v1 route: these statuses, each with OpenAI's error body."""
    codes = (*codes, 504) if 503 in codes else codes  # where Triton may be down, it may be busy
    return {code: {"model": OpenAIError, "description": _ERRORS[code],
                   **({"headers": _AUTH_HEADER} if code == 401 else {})} for code in codes}


TokenArray = list[StrictInt]
_NAMES = [m.name for m in MODELS]
_MODEL_NAMES = f"{', '.join(_NAMES[:-1])} or {_NAMES[-1]}" if len(_NAMES) > 1 else _NAMES[0]
_IMAGE_MODELS = ", ".join(m.name for m in MODELS if m.input == "image")


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="allow")  # clients add fields of their own (e.g. `user`): ignored

    input: str | list[str | TokenArray | StrictInt] = Field(
        description=f"a text or a list of up to {MAX_INPUTS} texts, at most {MAX_REQUEST_CHARS:,} characters in all "
                    f"({_IMAGE_MODELS}: base64 images or data: URLs); token arrays are refused",
        examples=["reset password", ["first text", "second text"]])
    model: str = Field(examples=[MODELS[0].name], description=f"{_MODEL_NAMES} (GET /v1/models)")
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="base64: each vector as little-endian float32 bytes, base64-encoded")
    dimensions: Annotated[int, Field(ge=1)] | None = Field(None, description="only the model's own width is accepted")
    user: str | None = Field(None, description="accepted and ignored")


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str


class Usage(BaseModel):
    prompt_tokens: int = Field(description="tokens the model saw, special tokens included (0 for images)")
    total_tokens: int


class EmbeddingList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: Usage


class ModelCard(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "multimodal-search"
    input: Literal["text", "image"] = Field(description="extension: what the model embeds")
    dimensions: int | None = Field(None, description="extension: the vectors' width, when known")


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
