"""Does the served model give the answers it should? `search models verify`, `search status
--verify`, `/readyz?verify=1` and the page's status panel all call ``verify_models``.

Per family that is built and served: the golden check (the build's PyTorch outputs on the golden
inputs against what the live ensembles return now, within the bounds for the served precision) and,
when the build came from the publisher's checkpoint, the published known answers. docs/verify.md.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import httpx
from tritonclient.utils import InferenceServerException

from search import models as registry
from search.errors import BadRequest, ServiceError, TritonUnavailable
from search.models import Family, published
from search.models.verify import FAIL, PASS, SKIP, TOLERANCES, Check, changed_files, precision, verify_golden
from search.services.base import ServiceBase

FETCH_TIMEOUT_S = 10.0  # the publishers' example images (published checks only)


class Verification(ServiceBase):
    def verify_models(self, families: list[str] | None = None, *, published_checks: bool | None = None,
                      max_age_s: float = 0.0) -> dict:
        """``{"passed": bool, "checked_at": ISO time, "families": [{family, status, precision,
        checkpoint, checks: [...]}, ...]}``.
        ``families``: those to check (default: every built one; a named one not built or not served
        fails). ``published_checks``: None runs them where the checkpoint is recognised, True always,
        False never. A run is CPU-heavy and any read key may ask: one runs at a time, and callers asking
        for the same check meanwhile share its report. ``max_age_s``: a report at most this old will do."""
        names = list(dict.fromkeys(families or []))
        known = [f.family for f in registry.FAMILIES]  # the registry as it is now
        for name in names:
            if name not in known:
                raise BadRequest(f"family: no model family '{name}' (families: {', '.join(known)})")
        return self.resources.verify_runs.run((tuple(sorted(names)), published_checks),
                                              lambda: self._verify_served(names, published_checks), max_age_s)

    def _verify_served(self, names: list[str], published_checks: bool | None) -> dict:
        if self.triton.down():  # a busy Triton is slow, not gone: its checks say so themselves
            raise TritonUnavailable(f"Triton is not reachable at {self.triton_url()}: {self.resources.triton_hint()}")
        reports = [self._verify_family(fam, fam.family in names, published_checks)
                   for fam in registry.FAMILIES if not names or fam.family in names]
        verified = [r for r in reports if r["status"] in (PASS, FAIL.lower())]
        failed = [r for r in reports if r["status"] == FAIL.lower() or (r["asked"] and r["status"] != PASS)]
        if not verified and not failed:
            raise ServiceError("nothing to verify: no model is built and served (run `search models build`, then "
                               "`search triton up`)")
        for r in reports:
            del r["asked"]
        return {"passed": not failed, "checked_at": datetime.now(UTC).isoformat(timespec="milliseconds"),
                "families": reports}

    def verify_report(self, max_age_s: float = 0.0) -> dict:
        """``verify_models()`` for panels that show it beside other things: an error (Triton down,
        nothing served) is reported in ``error`` instead of raised."""
        try:
            return self.verify_models(max_age_s=max_age_s)
        except ServiceError as exc:
            return {"passed": False, "error": str(exc), "families": []}

    def readiness_verified(self) -> dict:
        """``readiness()`` plus the verification: ready only when every served model passes. The
        report may be up to ``verify_reuse_s`` old (probes poll); ``age_s`` says how old it is."""
        body = self.readiness()
        report = self.verify_report(max_age_s=self.settings.verify_reuse_s)
        if "checked_at" in report:
            age = datetime.now(UTC) - datetime.fromisoformat(report["checked_at"])
            report["age_s"] = round(max(0.0, age.total_seconds()), 1)
        body["verify"] = report
        body["ready"] = bool(body["ready"] and report["passed"])
        return body

    def _verify_family(self, fam: Family, asked: bool, published_checks: bool | None) -> dict:
        repo: Path = self.settings.triton_repo
        report = {"family": fam.family, "display": fam.display, "asked": asked, "precision": None,
                  "checkpoint": None, "source": None, "checks": []}
        if not fam.is_built(repo):
            return {**report, "status": "not built"}
        if not all(self.triton.model_ready(name) for name in fam.ensembles):
            return {**report, "status": "not served"}
        manifest = fam.manifest(repo) or {}
        source = str(manifest.get("source", ""))
        checkpoint = manifest.get("checkpoint") or published.identify(fam.family, source, manifest.get("weights"))
        report.update(source=source, checkpoint=checkpoint)
        checks: list[Check] = []
        try:
            prec = precision(fam, manifest, self.triton)
            tol = TOLERANCES[prec]
            report["precision"] = prec
            checks += verify_golden(fam, repo, self.triton, tol)
            run_published = published_checks if published_checks is not None else checkpoint is not None
            if run_published:
                ctx = published.Context(self.triton, repo, tol, self._fetch, str(self.verify_cache()))
                checks += published.run(fam.family, ctx)
            else:
                ids = " or ".join(fam.checkpoints) or "none"
                why = "skipped on request" if published_checks is False else \
                    f"do not apply: built from {source}, not the published checkpoint ({ids})"
                checks.append(Check(fam.family, "published answers", SKIP, detail=why))
        except (ServiceError, InferenceServerException) as exc:  # the ensemble failed outright: that is a miss
            checks.append(Check(fam.family, "served ensembles", FAIL, detail=" ".join(str(exc).split())[:300]))
        if any(c.status == FAIL for c in checks):
            changed = changed_files(fam, repo, manifest)
            if changed:
                checks.append(Check(fam.family, "model files", FAIL, f"{len(changed)} changed since the build",
                                    "as built (build.json checksums)", ", ".join(changed[:4])))
        failed = any(c.status == FAIL for c in checks)
        return {**report, "status": FAIL.lower() if failed else PASS, "checks": [c.as_dict() for c in checks]}

    def _fetch(self, url: str, file: str) -> bytes | None:
        """A publisher's example image: from ``<data dir>/verify/`` or, once, from its URL."""
        folder = self.verify_cache()
        path = folder / file
        if path.is_file():
            return path.read_bytes()
        try:
            r = httpx.get(url, timeout=FETCH_TIMEOUT_S, follow_redirects=True)
        except httpx.HTTPError:
            return None
        if r.status_code != 200 or not r.content:
            return None
        folder.mkdir(parents=True, exist_ok=True)
        path.write_bytes(r.content)
        return r.content

    def verify_cache(self) -> Path:
        """Where the publishers' example images are kept (saved there by hand on an offline machine)."""
        return self.settings.data_dir / "verify"
