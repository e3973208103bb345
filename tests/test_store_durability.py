"""kill -9 during writes: the embedded engine never shows half a batch, and an interrupted ingest
resumes to exactly the points of an uninterrupted one."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from cli_helpers import run
from document_helpers import long_doc
from qdrant_client import models

from search.config import PROJECT_ROOT
from search.store import DOCUMENTS, open_location

BATCH = 2000

WRITER = textwrap.dedent("""
    import sys
    from qdrant_client import models
    from search.store import DOCUMENTS, open_location
    path, first, BATCH = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    store = open_location("edge", path)
    store.ensure(DOCUMENTS)
    for b in range(first, first + 1000):
        points = [models.PointStruct(id=b * 100_000 + i, vector={"minilm": [1.0, float(i % 7)] + [0.0] * 382},
                                     payload={"batch": b, "text": "x" * 200}) for i in range(BATCH)]
        print("start", b, flush=True)
        store.upsert(DOCUMENTS.name, points)
        print("done", b, flush=True)
""")


def test_kill_9_mid_upsert_never_leaves_half_a_batch(tmp_path):
    path = str(tmp_path / "store-edge")
    rng = random.Random(8)
    acknowledged, first = set(), 0
    for _round in range(4):
        child = subprocess.Popen([sys.executable, "-c", WRITER, path, str(first), str(BATCH)], stdout=subprocess.PIPE, text=True,
                                 cwd=PROJECT_ROOT, env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)})
        started = 0
        for line in child.stdout:
            word, b = line.split()
            if word == "done":
                acknowledged.add(int(b))
            elif (started := started + 1) == 3:
                time.sleep(rng.uniform(0.015, 0.08))  # inside the third batch's upsert (~20 ms translating, ~50 ms in the engine)
                child.send_signal(signal.SIGKILL)
                break
        child.wait()
        assert child.returncode == -signal.SIGKILL
        store = open_location("edge", path)
        counts = {b: store.count(DOCUMENTS.name, models.Filter(must=[models.FieldCondition(
            key="batch", match=models.MatchValue(value=b))])) for b in range(first + 3)}
        store.close()
        assert set(counts.values()) <= {0, BATCH}, counts  # whole batches or nothing
        assert all(counts[b] == BATCH for b in acknowledged)  # every acknowledged batch survived
        first += 3


KILLER = textwrap.dedent("""
    import os, signal, sys
    from indexer import writer
    from search.store.edge import EdgeStore
    k, calls, upsert = int(os.environ["KILL_AFTER_UPSERTS"]), [0], EdgeStore.upsert

    def upsert_then_die(self, collection, points):
        upsert(self, collection, points)
        calls[0] += 1
        if calls[0] == k:
            os.kill(os.getpid(), signal.SIGKILL)

    EdgeStore.upsert = upsert_then_die
    writer.WRITE_BATCH = 4  # many write batches, so the kill lands mid-ingest
    writer.WRITE_VALUES = int(os.environ.get("WRITE_VALUES", writer.WRITE_VALUES))
    from indexer.cli import main
    sys.argv = ["indexer", "ingest", *sys.argv[1:]]
    main()
""")


def stored(data_dir) -> dict[str, dict]:
    with open_location("edge", str(data_dir / "store-edge")) as store:
        return {p.id: p.payload for p in store.all_points(DOCUMENTS.name)}


def test_ingest_killed_mid_way_resumes_to_exactly_the_same_points(env, docs, tmp_path):
    reference = {**env, "SEARCH_DATA_DIR": str(tmp_path / "reference")}
    assert run(reference, "ingest", str(docs), module="indexer").returncode == 0
    want = stored(tmp_path / "reference")

    killed = subprocess.run([sys.executable, "-c", KILLER, str(docs)], env={**env, "KILL_AFTER_UPSERTS": "5"},
                            cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    data_dir = tmp_path / "data"
    partial = stored(data_dir)
    assert 0 < len(partial) < len(want) and set(partial) <= set(want)
    # No file looks complete unless all its chunks are there (chunk 0, the completion record, is written last).
    for head in (p for p in partial.values() if p["chunk"] == 0):
        assert sum(p["sha256"] == head["sha256"] for p in partial.values()) == head["n_chunks"]

    again = run(env, "ingest", str(docs), "--json", module="indexer")
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["failed"] == 0 and report["indexed"] + report["unchanged"] == 17 and report["unchanged"] > 0
    final = stored(data_dir)
    assert set(final) == set(want)
    assert {k: v["paths"] for k, v in final.items()} == {k: v["paths"] for k, v in want.items()}


@pytest.mark.parametrize("written", ["in parts", "at once"])
def test_a_file_killed_before_its_unit_0_then_changed_leaves_none_of_its_old_points(env, tmp_path, written):
    """A file's other units are written before its unit 0, marked partial: a long file's in parts as
    it is embedded, a shorter one's in one request just before its unit 0. Killed before the file
    was complete, then changed: the next run deletes the points of the content that never completed,
    and the store holds what an ingest of the new content alone holds."""
    kb = tmp_path / "kb"
    long_doc(kb, parts=6)
    kill = {"KILL_AFTER_UPSERTS": "2", "WRITE_VALUES": "1000"} if written == "in parts" else {"KILL_AFTER_UPSERTS": "1"}
    killed = subprocess.run([sys.executable, "-c", KILLER, str(kb)], cwd=PROJECT_ROOT, capture_output=True, text=True,
                            env={**env, **kill}, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    left = stored(tmp_path / "data")
    assert left and all(p["partial"] > 0 and p["chunk"] > 0 for p in left.values())

    long_doc(kb, parts=4)  # other content now
    again = run(env, "ingest", str(kb), "--json", module="indexer")
    assert again.returncode == 0, again.stderr
    reference = {**env, "SEARCH_DATA_DIR": str(tmp_path / "reference")}
    assert run(reference, "ingest", str(kb), module="indexer").returncode == 0
    final, want = stored(tmp_path / "data"), stored(tmp_path / "reference")
    assert set(final) == set(want) and not set(final) & set(left)
    assert all(p["partial"] == 0 for p in final.values())
