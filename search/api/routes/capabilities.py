"""The families' own capabilities (search.models.capabilities): one POST /<name> each, its body the
capability's query spec and its answer the capability's answer model. Built when the app is, from
the registry, behind the same key check as the searches (KeyGate refuses a key before the body is
read); a spec with a ``kb`` is held to the key's knowledge bases as the searches are."""

from __future__ import annotations

import inspect

from fastapi import APIRouter, Depends, Request

from search.api.backend import Backend
from search.api.deps import get_backend
from search.api.schemas import errors
from search.api.security import need_kb, require_key
from search.models import Capability, capabilities


def router() -> APIRouter:
    """One route per registered capability."""
    out = APIRouter(dependencies=[Depends(require_key(writes=False))], tags=["capabilities"],
                    responses=errors(401, 400, 403, 422, 503))
    for cap in capabilities():
        out.add_api_route(cap.path, _endpoint(cap), methods=["POST"], summary=cap.help, response_model=cap.answer,
                          operation_id=cap.name)
    return out


def _endpoint(cap: Capability):
    async def answer(body, request: Request, backend: Backend) -> dict:
        if "kb" in cap.spec.model_fields:
            body = body.model_copy(update={"kb": need_kb(request, body.kb)})
        found = await backend.run(lambda: backend.service().ask(cap, body))
        return found.model_dump(mode="json")

    # FastAPI reads the body's model from the signature: the capability's spec, known only now
    answer.__signature__ = inspect.Signature([
        inspect.Parameter("body", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=cap.spec),
        inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Request),
        inspect.Parameter("backend", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Backend,
                          default=Depends(get_backend)),
    ], return_annotation=dict)
    answer.__name__ = cap.name
    return answer
