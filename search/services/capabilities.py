"""The families' own capabilities (``search.models.capabilities``), answered for every face: the
CLI, the REST API, the MCP tools and the page all call ``ask``, as they call the searches."""

from __future__ import annotations

from pydantic import BaseModel
from tritonclient.utils import InferenceServerException

from search.errors import BadRequest
from search.models import Capability
from search.services.base import ServiceBase, served


class Capabilities(ServiceBase):
    def ask(self, capability: Capability, spec: BaseModel) -> BaseModel:
        """``capability``'s answer to ``spec`` (its query spec, as the face built it). A model that is not
        served is a ModelNotReady that says how to serve it; an input the served model refuses
        (INVALID_ARG) is a BadRequest in its words."""
        if not isinstance(spec, capability.spec):
            raise TypeError(f"{capability.name} takes a {capability.spec.__name__}, not a {type(spec).__name__}")
        fam = capability.family
        try:
            with served(fam.ensembles[0], fam.display):
                answer = capability.run(self, spec)
        except InferenceServerException as exc:
            if "INVALID_ARG" not in str(exc.status() or ""):
                raise
            raise BadRequest(" ".join((exc.message() or str(exc)).split())) from None
        return capability.answer.model_validate(answer)  # the answer model checks the family's own answer
