"""Which files failed in earlier runs, so a re-run tells new failures from old ones.

A small JSON file in the data dir: {path (stored form): {"size", "mtime", "reason"}}, beside the
store rather than in it (it describes local files, not searchable content). It only changes how a
failure is reported: every file is still retried, so a fix is picked up at once."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from indexer.report import FAILED, FileOutcome, IngestReport
from search.paths import from_stored, stored


class FailureMemory:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.records = self._load()
        self._seen: list[FileOutcome] = []  # outcomes of remembered files: the report may not keep them

    def watch(self, outcome: FileOutcome) -> None:
        """Note the outcome of a file that failed before (called per file while the run goes on)."""
        if self.records and stored(outcome.path) in self.records:
            self._seen.append(outcome)

    def update(self, report: IngestReport) -> None:
        """Mark the report's failures that failed the same way last time on an unchanged file
        (``still_failing``), then remember this run's failures and forget the files that now work."""
        records, touched = self.records, set()
        for i, o in enumerate(report.outcomes):  # every failure is kept in the report
            key = stored(o.path)
            touched.add(key)
            if o.status != FAILED:
                records.pop(key, None)
                continue
            now = {**_size_mtime(o.path), "reason": o.reason}
            if records.get(key) == now:
                report.outcomes[i] = replace(o, still_failing=True)
            records[key] = now
        for o in self._seen:
            touched.add(key := stored(o.path))
            if o.status != FAILED:
                records.pop(key, None)
        # Files this run did not look at stay remembered while they exist (another root's).
        self.records = {k: v for k, v in records.items() if k in touched or os.path.lexists(from_stored(k))}
        self._save(self.records)

    def _load(self) -> dict:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # none yet, or unreadable: every failure counts as new
            return {}
        return data if isinstance(data, dict) else {}

    def _save(self, records: dict) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(records, ensure_ascii=False, indent=1), encoding="utf-8")
            os.replace(tmp, self.path)  # a crash leaves the old record or the new one
        except OSError:
            pass  # only the wording of the next summary depends on it


def _size_mtime(path: str) -> dict:
    try:
        st = os.stat(path)
    except OSError:
        return {"size": None, "mtime": None}
    return {"size": st.st_size, "mtime": st.st_mtime}
