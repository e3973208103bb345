"""OpenAI-compatible embeddings (`POST /v1/embeddings`) and the models that serve them (`GET /v1/models`)."""

from __future__ import annotations

import base64

from fastapi import APIRouter, Depends, Request

from search.api.backend import Backend
from search.api.deps import backend_of, get_backend
from search.api.openai import EmbeddingList, EmbeddingRequest, ModelCard, ModelList, errors
from search.api.responses import FastJSON
from search.api.security import require_key
from search.errors import NotFound
from search.keys import Principal

router = APIRouter(prefix="/v1", dependencies=[Depends(require_key(writes=False))], tags=["openai"],
                   responses=errors(401, 413, 500, 503, "4XX"))


@router.post("/embeddings", summary="Vectors from the served models, in OpenAI's request and response shape",
             response_model=EmbeddingList, responses=errors(400, 404))
async def embeddings(body: EmbeddingRequest, request: Request) -> dict:
    # backend_of, not a dependency: a hot route saves FastAPI's per-dependency cost
    return await answer_embeddings(backend_of(request), body)


async def answer_embeddings(backend: Backend, body: EmbeddingRequest, _who: Principal | None = None) -> FastJSON:
    """The route's answer, also given by the fast path (search/api/hot.py): any key that passed may embed."""
    out = await backend.embedder().embed(body.model, body.input, dimensions=body.dimensions)  # Triton's wait, awaited
    if body.encoding_format == "base64":
        data = [base64.b64encode(v.astype("<f4").tobytes()).decode("ascii") for v in out.vectors]
    else:
        data = out.vectors.tolist()
    tokens = sum(out.tokens)
    # A response as is: jsonable_encoder over thousands of floats per vector costs more than the model
    return FastJSON({"object": "list", "model": out.model.name, "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                     "data": [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(data)]})


@router.get("/models", summary="The embedding models served now", response_model=ModelList)
def models(backend: Backend = Depends(get_backend)) -> dict:
    return {"object": "list", "data": [_card(m) for m in backend.embedder().embedding_models() if m["ready"]]}


@router.get("/models/{model}", summary="One embedding model", response_model=ModelCard, responses=errors(404))
def model(model: str, backend: Backend = Depends(get_backend)) -> dict:
    for m in backend.embedder().embedding_models():
        if model == m["id"] or model in m["aliases"]:
            if not m["ready"]:
                break
            return _card(m)
    raise NotFound(f"model: {model!r} is not served here (GET /v1/models lists those that are)", "model")


def _card(m: dict) -> dict:
    return {"id": m["id"], "object": "model", "created": 0, "owned_by": "multimodal-search", "input": m["input"],
            "dimensions": m["dimensions"], "description": m["description"]}
