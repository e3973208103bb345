"""An ingest job rides out its Triton being stopped and killed (issue: "Transient is not fatal"): a
dedicated Triton serving the documents' model is frozen (SIGSTOP of its whole process group, as a
suspended or swamped machine) for longer than the gRPC deadline, then continued; later killed
(SIGKILL) and started again as `search triton up` does. The job pauses "waiting for Triton", goes
on by itself, and ends done with every file indexed once. Before, the first missed deadline failed
the whole job with the files done so far."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from indexed import settings_for

from indexer.jobs import DONE, FAILED, JobStore
from indexer.patience import GaveUp
from indexer.service import IngestService
from search.api.jobs import Jobs
from search.errors import TritonUnavailable
from search.models import MiniLM
from search.store import DOCUMENTS
from search.triton.local import LocalTriton
from search.triton.supervise import clean

FILES = 240
STOPPED_S = 40  # well past the deadline below: every request in flight misses it


@pytest.fixture
def server(model_repo, tmp_path):
    srv = LocalTriton(model_repo, tmp_path / "triton", models=list(MiniLM().triton_models))
    srv.start(timeout=180)
    prefixes = [srv.state.shm_prefix]
    yield srv, prefixes
    srv.stop()
    for prefix in prefixes:
        clean(prefix)


def notes(folder: Path) -> list[Path]:
    folder.mkdir()
    for i in range(FILES):
        (folder / f"note-{i:03d}.txt").write_text(f"Note {i}: the printer on floor {i % 9} needs toner; badge {i * 7919 % 10007}.\n")
    return sorted(folder.iterdir())


def test_a_job_waits_out_a_stopped_then_killed_triton_and_indexes_every_file_once(server, tmp_path):
    srv, prefixes = server
    settings = settings_for(tmp_path / "data", srv.repo, srv.grpc_port).model_copy(
        # small requests: many of them, some always in flight; a batch's retries (10 s) end well inside the
        # 40 s stop, so the run itself must wait it out
        update={"triton_timeout_s": 5.0, "embed_batch_size": 2, "triton_retry_budget_s": 10.0})
    files = notes(tmp_path / "notes")
    svc = IngestService(settings)
    done, reached, go_on = [0], {k: threading.Event() for k in ("stop", "kill")}, {k: threading.Event() for k in ("stop", "kill")}
    waiting: list[str | None] = []

    def ingest(paths, *, local, on_file, on_wait, **kw):
        def noted(outcome):
            on_file(outcome)
            done[0] += 1
            # the job's own thread holds here until Triton is down: the outage falls mid-job, however fast
            for name, at in (("stop", 20), ("kill", 120)):
                if done[0] == at:
                    reached[name].set()
                    assert go_on[name].wait(120)

        def noted_wait(why):
            waiting.append(why)
            on_wait(why)

        return svc.ingest(paths, on_file=noted, on_wait=noted_wait, **kw)

    jobs = Jobs(ingest, JobStore(tmp_path / "jobs.sqlite"))
    try:
        job = jobs.submit([tmp_path / "notes"], prune=False)
        assert reached["stop"].wait(300), jobs.get(job.id)
        group = srv.state.pid  # the supervisor leads the group: it, Triton and the model's processes
        os.killpg(group, signal.SIGSTOP)
        go_on["stop"].set()
        time.sleep(STOPPED_S)
        seen = jobs.get(job.id)
        os.killpg(group, signal.SIGCONT)
        assert seen.state == "running" and seen.waiting and seen.waiting.startswith("waiting for Triton: "), seen
        assert reached["kill"].wait(600), jobs.get(job.id)
        os.killpg(srv.state.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while srv.is_ready() and time.monotonic() < deadline:
            time.sleep(0.2)
        go_on["kill"].set()
        time.sleep(5)  # requests meet no Triton at all
        srv.start(timeout=180)  # what `search triton up` does
        prefixes.append(srv.state.shm_prefix)
        ended = jobs.wait(job.id, stop=lambda: time.monotonic() > deadline + 900)
    finally:
        for event in go_on.values():
            event.set()
        jobs.close()
    assert ended.state == DONE, (ended.state, ended.error)
    assert ended.state != FAILED and ended.counts["indexed"] == FILES and not ended.failures, ended.as_dict()
    assert ended.waiting is None and waiting[0].startswith("waiting for Triton: ") and None in waiting
    store = svc.resources.store
    per_file = Counter(p.payload["path"] for p in store.all_points(DOCUMENTS.name))
    assert per_file == Counter({str(f): 1 for f in files})  # each file once: nothing lost, nothing twice
    svc.close()


def test_past_the_wait_a_run_ends_in_one_line_and_keeps_the_files_it_completed(server, tmp_path):
    """A Triton killed and not started again: the run waits SEARCH_INGEST_TRITON_WAIT_S, then ends
    with that one line; every file reported indexed before is in the store, whole, once."""
    srv, _ = server
    settings = settings_for(tmp_path / "data", srv.repo, srv.grpc_port).model_copy(
        update={"triton_timeout_s": 5.0, "embed_batch_size": 2, "ingest_triton_wait_s": 3.0, "triton_retry_budget_s": 2.0})
    notes(tmp_path / "notes")
    svc = IngestService(settings)
    indexed: list[str] = []

    def on_file(outcome):
        indexed.append(outcome.path)
        if len(indexed) == 30:
            os.killpg(srv.state.pid, signal.SIGKILL)

    with pytest.raises(GaveUp) as exc:
        svc.ingest([tmp_path / "notes"], on_file=on_file)
    message = str(exc.value)
    assert "\n" not in message and message.startswith("Triton did not answer for 3 s (SEARCH_INGEST_TRITON_WAIT_S)")
    per_file = Counter(p.payload["path"] for p in svc.resources.store.all_points(DOCUMENTS.name))
    assert len(indexed) >= 30 and all(per_file[p] == 1 for p in indexed) and set(per_file) <= {str(p) for p in indexed}
    svc.close()


def test_a_live_triton_too_busy_to_say_its_models_are_ready_is_waited_for_at_the_start(settings, docs, monkeypatch):
    """Seen at a load of 150 on 2 cores: the start's "is the model ready?" missed its 5 s deadline
    while Triton was live, and the run failed before it began. The session's Triton is live here; its
    first readiness answer is made to miss."""
    svc = IngestService(settings)
    client = svc.resources.triton
    ready, missed = client.model_ready, []

    def busy_once(name, **kw):
        if not missed:
            missed.append(name)
            raise TritonUnavailable(f"Triton is not reachable at {settings.triton_url} (Deadline Exceeded)")
        return ready(name, **kw)

    monkeypatch.setattr(client, "model_ready", busy_once)
    waits: list = []
    report = svc.ingest([docs], on_wait=waits.append)
    assert missed and report.counts["indexed"] == len(list(docs.iterdir())) and not report.failures
    assert waits == [f"waiting for Triton: Triton is not reachable at {settings.triton_url} (Deadline Exceeded)", None]
    svc.close()
