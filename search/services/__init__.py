"""The query services: the one implementation of search that the CLI, the REST API and the page
call. Ingest is the indexer's service (``indexer.service``); both share ``search.resources``.

Names load on first use (PEP 562): the CLI's fast path through a running server imports
``search.services.results`` and ``search.services.remote`` without qdrant-client (slow to import).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_WHERE = {
    "SearchService": "search.services.query",
    "MAX_TOP_K": "search.services.options", "MAX_PAGE": "search.services.options",
    "MAX_DEPTH": "search.services.options", "MAX_GROUP_SIZE": "search.services.options", "GROUP_BY": "search.services.options",
    "MODES": "search.services.options", "SORTS": "search.services.options",
    "ImageFilters": "search.services.options", "check_query_options": "search.services.options",
    "parse_date": "search.services.options", "parse_near": "search.services.options",
    "HIT_CHARS": "search.services.options", "HIT_CHARS_LIMIT": "search.services.options",
    "DEFAULT_MIN_RELEVANCE": "search.services.options", "HitList": "search.services.results",
    "DocumentHit": "search.services.results", "DocumentGroup": "search.services.results", "ImageHit": "search.services.results",
    "prompt_context": "search.services.results",
}

if TYPE_CHECKING:
    from search.services.options import (
        DEFAULT_MIN_RELEVANCE,
        GROUP_BY,
        HIT_CHARS,
        HIT_CHARS_LIMIT,
        MAX_DEPTH,
        MAX_GROUP_SIZE,
        MAX_PAGE,
        MAX_TOP_K,
        MODES,
        SORTS,
        ImageFilters,
        check_query_options,
        parse_date,
        parse_near,
    )
    from search.services.query import SearchService
    from search.services.results import DocumentGroup, DocumentHit, HitList, ImageHit, prompt_context


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'search.services' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)


__all__ = ["DEFAULT_MIN_RELEVANCE", "GROUP_BY", "HIT_CHARS", "HIT_CHARS_LIMIT", "MAX_DEPTH", "MAX_GROUP_SIZE", "MAX_PAGE",
           "MAX_TOP_K", "MODES", "SORTS", "DocumentGroup", "DocumentHit", "HitList", "ImageFilters", "ImageHit", "SearchService",
           "check_query_options", "parse_date", "parse_near", "prompt_context"]
