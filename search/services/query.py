"""Every query a face can ask, over one store and one Triton client."""

from search.services.admin import Admin
from search.services.capabilities import Capabilities
from search.services.embeddings import Embeddings
from search.services.images import ImageSearch
from search.services.reading import TextReading
from search.services.relevance_check import RelevanceCheck
from search.services.verify import Verification


class SearchService(RelevanceCheck, ImageSearch, TextReading, Embeddings, Admin, Verification, Capabilities):
    """Documents, photos, entailment, the text in images, embeddings on request, status, the store's own commands,
    model verification and the families' own capabilities."""
