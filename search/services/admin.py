"""What the faces show about the system itself: status, readiness, what blocks a search mode,
collection counts, and the store's own commands (stats, optimize, migrate)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Collection
from dataclasses import asdict
from pathlib import Path

from search.errors import BadRequest, EmptyCollection, NotFound, ServiceError, StoreInUse, StoreUnavailable
from search.models import FAMILIES, Family, for_kind, for_mode, required
from search.services.base import ServiceBase
from search.store import (
    COLLECTIONS,
    DEFAULT_KB,
    DOCUMENTS,
    IMAGES,
    Migrated,
    kb_collection,
    kb_of,
    kb_thumbnails,
    migrate,
    open_location,
    parse_spec,
)
from search.triton.client import START_HINT


class Admin(ServiceBase):
    # -- status
    def status(self) -> dict:
        """Triton's part and the store's, each on its own: a store that another process holds (or
        a server that does not answer) is reported as such, with Triton's part still shown."""
        out: dict = {"triton": self.triton_status(), "store": {**self.store_location(), "available": True}}
        try:
            out["store"].update(self.collections())
        except StoreUnavailable as exc:
            in_use = isinstance(exc, StoreInUse)
            out["store"].update(available=False, error=str(exc), in_use=in_use,
                                holder_pid=exc.pid if in_use else None, collections={})
        if hint := self._legacy_hint().strip(" ;"):
            out["store"]["note"] = hint
        return out

    def triton_status(self) -> dict:
        """URL, liveness and, per served ensemble, whether its files are built and it is ready."""
        live = self.triton.is_live()
        models = {}
        for fam in FAMILIES:
            built = fam.is_built(self.settings.triton_repo)
            for name in fam.ensembles:
                models[name] = {"built": built, "ready": bool(live and self.triton.model_ready(name))}
                if models[name]["ready"]:  # READY stays true when the model's process died: probe with a tiny inference
                    models[name].update(self.triton.probe(name).as_dict())
        return {"url": self.triton_url(), "live": live, "models": models, **({} if live else {"hint": self.resources.triton_hint()})}

    def store_location(self) -> dict:
        return {"backend": self.settings.store_backend, "location": self.settings.qdrant_location}

    def collections(self, kbs: Collection[str] | None = None) -> dict:
        """Points per collection of the default knowledge base (``collections``, as before KBs) and
        how many of its document chunks carry each optional family's vectors (``documents_with_<family>``);
        points per kind in every knowledge base
        (``kbs``). ``kbs``: only these knowledge bases are shown (None: all)."""
        # The store's own point counts (exact=False: segment metadata, no scan), so status stays fast
        # at a million points; the optional families' counts are one keyword-index lookup each.
        seen = set(kbs) if kbs is not None else None
        optional = [f for f in for_kind(DOCUMENTS.name) if f.optional]
        out: dict = {"collections": {}, **{_with(f): 0 for f in optional}, "kbs": {}}
        if seen is None or DEFAULT_KB in seen:
            out["collections"] = {name: self.store.count(name, exact=False) for name in COLLECTIONS}
            for f in optional:
                out[_with(f)] = self.store.count_where(DOCUMENTS.name, "models", f.family)
        for kb in self.knowledge_bases():
            if seen is None or kb in seen:
                out["kbs"][kb] = {kind: self.store.count(kb_collection(kb, kind), exact=False) for kind in COLLECTIONS}
        return out

    def knowledge_bases(self) -> list[str]:
        """The knowledge bases the store holds, the default one always first."""
        named = {found[0] for c in self.store.collections() if (found := kb_of(c))}
        return [DEFAULT_KB, *sorted(named - {DEFAULT_KB})]

    def delete_kb(self, kb: str) -> dict:
        """Delete a knowledge base: its collections (every point) and its photos' thumbnails. Deleting
        the default one empties it. Returns the points deleted per kind."""
        if self._collection(kb, DOCUMENTS.name) and kb not in self.knowledge_bases():
            raise NotFound(f"kb: no knowledge base {kb!r} (there are: {', '.join(self.knowledge_bases())})")
        removed = {}
        for kind in COLLECTIONS:
            collection = self._collection(kb, kind)
            removed[kind] = self.store.count(collection)
            self.store.drop(collection)
        thumbs = kb_thumbnails(self.settings.data_dir, kb)
        if thumbs.is_dir():
            shutil.rmtree(thumbs)
        return {"kb": kb, "deleted": removed}

    def readiness(self) -> dict:
        """Triton and the store, each reported on its own; ready when both answer and a model is served."""
        try:
            triton = self.triton_status()
        except ServiceError:
            triton = {"url": self.triton_url(), "live": False, "models": {}}
        detail = triton["models"]
        triton["models"] = {name: m["ready"] and m.get("healthy", True) for name, m in detail.items()}
        triton["unhealthy"] = {name: m["reason"] for name, m in detail.items() if m["ready"] and not m.get("healthy", True)}
        store: dict = {**self.store_location(), "reachable": True}
        try:
            self.store.exists(DOCUMENTS.name)
        except ServiceError as exc:
            store.update(reachable=False, error=str(exc))
        ready = triton["live"] and any(triton["models"].values()) and store["reachable"]
        return {"ready": ready, "triton": triton, "qdrant": store}

    def blocker(self, status: dict, kind: str, doc_mode: str | None = None) -> str | None:
        return blocker(status, kind, doc_mode)

    # -- the store itself
    def store_stats(self) -> dict:
        """Points, segments, index status, payload indexes and disk size per collection."""
        store = self.store
        out = {"backend": store.backend, "location": store.location, "collections": {}}
        for name in [c for c in store.collections() if kb_of(c)]:  # every knowledge base's
            out["collections"][name] = asdict(store.stats(name))
        sizes = [c["disk_bytes"] for c in out["collections"].values()]
        out["disk_bytes"] = sum(sizes) if sizes and None not in sizes else None
        hint = self._legacy_hint().strip(" ;")
        if hint:
            out["note"] = hint
        return out

    def optimize_store(self) -> None:
        for name in [c for c in self.store.collections() if kb_of(c)]:
            self.store.optimize(name)

    def migrate_store(self, to: str, source: str | None = None,
                      progress: Callable[[str, int, int], None] | None = None) -> list[Migrated]:
        """Copy every collection from ``source`` (default: the configured store) to ``to``:
        'edge[:PATH]', 'local[:PATH]' or a server URL (see store.parse_spec)."""
        s = self.settings
        src_spec = parse_spec(source, s) if source else (s.store_backend, s.qdrant_location)
        dst_spec = parse_spec(to, s)
        if src_spec == dst_spec:
            raise BadRequest(f"to: the target is the source ({dst_spec[0]} at {dst_spec[1]})")
        if src_spec[0] != "server" and not Path(src_spec[1]).exists():
            raise BadRequest(f"from: no {src_spec[0]} store at {src_spec[1]}")
        self.close()  # the source may be this process's own embedded store
        key = s.qdrant_api_key
        with open_location(*src_spec, api_key=key, prefix=s.collection_prefix) as src, \
                open_location(*dst_spec, api_key=key, prefix=s.collection_prefix, quantization=s.store_quantization) as dst:
            if not any(src.count(c) for c in src.collections()):
                raise EmptyCollection(f"nothing to migrate: the {src.describe()} is empty")
            return migrate(src, dst, progress=progress)


def blocker(status: dict, kind: str, doc_mode: str | None = None) -> str | None:
    """What the user must do before a search of ``kind`` ("documents", "text2image",
    "image2image", "entail") in ``doc_mode`` can answer, given ``status()``; None when it can."""
    t, counts = status["triton"], status["store"]["collections"]
    if not t["live"]:
        return f"Triton is not reachable at {t['url']}: {t.get('hint') or START_HINT}"
    if not status["store"].get("available", True) and kind != "entail":
        return status["store"]["error"]
    ready = {n for n, m in t["models"].items() if m["ready"]}
    if kind == "entail":
        fam = for_mode("entail")
        if not set(fam.ensembles) <= ready:
            return (f"Entailment needs the {fam.display} model, which is not built: run `search models build "
                    f"{fam.cli_option} DIR` {fam.build_hint}, then restart Triton")
        return None
    if kind == "documents":
        if not counts.get(DOCUMENTS.name):
            return "Nothing indexed yet: run `indexer ingest PATH` (e.g. `indexer ingest samples/docs`)"
        fam = for_mode(doc_mode) if doc_mode else None
        if fam is not None and fam.optional:
            if not set(fam.ensembles) <= ready:
                return (f"{doc_mode.capitalize()} search needs the {fam.display} model: run `search models build`, "
                        "then restart Triton")
            if not status["store"].get(_with(fam)):
                return (f"No documents have {fam.display} vectors yet (needed for {doc_mode} search): "
                        f"run `indexer ingest PATH` again now that {fam.display} is served")
        needed = required(DOCUMENTS.name)
        if needed.kinds[DOCUMENTS.name] not in ready:
            return f"Document search needs the {needed.display} model: run `search models build`, then restart Triton"
        return None
    photos = required(IMAGES)
    if not set(photos.ensembles) <= ready:
        return f"Photos need the {photos.display} model: run `search models build`, then restart Triton"
    if not counts.get(IMAGES):
        return "No photos indexed yet: run `indexer ingest ./photos`"
    return None


def _with(fam: Family) -> str:
    """The store status field counting the document chunks that carry an optional family's vectors."""
    return f"documents_with_{fam.family}"
