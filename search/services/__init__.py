"""The query services: the one implementation of search that the CLI, the REST API and the page
call. Ingest is the indexer's service (``indexer.service``); both share ``search.resources``."""

from search.services.admin import Admin
from search.services.documents import DocumentSearch
from search.services.filters import MAX_TOP_K, MODES, SORTS, ImageFilters, check_query_options, parse_date, parse_near
from search.services.images import ImageSearch
from search.services.relevance import DEFAULT_MIN_RELEVANCE, HitList
from search.services.results import DocumentHit, ImageHit, prompt_context
from search.services.verify import Verification


class SearchService(DocumentSearch, ImageSearch, Admin, Verification):
    """Every query a face can ask, over one store and one Triton client."""


__all__ = ["DEFAULT_MIN_RELEVANCE", "MAX_TOP_K", "MODES", "SORTS", "DocumentHit", "HitList", "ImageFilters", "ImageHit", "SearchService",
           "check_query_options", "parse_date", "parse_near", "prompt_context"]
