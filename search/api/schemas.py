"""Request bodies: pydantic models, so a bad field is a 422 that names it."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field

from search.services import MAX_TOP_K, MODES, SORTS, ImageFilters

MAX_PATHS = 100  # per ingest request


def utf8_text(value: str) -> str:
    try:
        value.encode("utf-8")  # JSON may carry lone surrogates, which the tokenizers cannot take
    except UnicodeEncodeError as exc:
        raise ValueError("must be valid UTF-8 text") from exc
    return value


Text = Annotated[str, AfterValidator(utf8_text)]
TopK = Annotated[int, Field(ge=1, le=MAX_TOP_K)]
Score = Annotated[float, Field(allow_inf_nan=False)]
# Calibrated relevance (docs/relevance.md): hits below it are hidden; none left -> "no_match": true.
MinRelevance = Annotated[float, Field(ge=0, le=1, description="hide hits whose calibrated relevance (how clearly they "
                                      "stand above the collection's background, 0..1; 0.9 = clearly) is below this; "
                                      "when none is left the answer says no_match: true")]


class DocumentQuery(BaseModel):
    query: Text = Field(min_length=1, max_length=2000, examples=["reset password"])
    top_k: TopK = 5
    mode: Literal[MODES] | None = Field(None, description="default: the server's search_mode (auto)")
    min_score: Score | None = None
    min_relevance: MinRelevance | None = None
    folder: Text | None = Field(None, max_length=4096, description="only files under this folder")


class PhotoFilters(BaseModel):
    after: Text | None = Field(None, max_length=64, examples=["2021-07-14"])
    before: Text | None = Field(None, max_length=64)
    camera: Text | None = Field(None, max_length=200)
    near: Text | None = Field(None, max_length=100, description="LAT,LON,KM", examples=["51.5,-0.12,10"])
    folder: Text | None = Field(None, max_length=4096)

    def to_filters(self) -> ImageFilters:
        return ImageFilters.parse(after=self.after, before=self.before, camera=self.camera, near=self.near,
                                  folder=self.folder)


class ImageQuery(PhotoFilters):
    text: Text = Field(min_length=1, max_length=2000, examples=["a dog on the beach"])
    top_k: TopK = 12
    min_score: Score | None = None
    min_relevance: MinRelevance | None = None
    sort: Literal[SORTS] = "score"
    verify: bool = Field(False, description="re-rank the top_k hits by OFA's probability that each photo entails the text")
    min_entailment: Annotated[float, Field(ge=0, le=1)] | None = Field(
        None, description="with verify: drop photos whose entailment probability is below this")


class IngestPaths(BaseModel):
    paths: list[Text] = Field(min_length=1, max_length=MAX_PATHS,
                              description="absolute server-side paths inside the configured roots")
    prune: bool = Field(False, description="also remove indexed files under these paths that are gone from disk")
