"""API keys scoped to knowledge bases and rights: the keys file (hashed at rest, checked at start-up)
and a real `search serve` where a key for KB `hr` is refused on KB `eng` and never sees its passages
through any route, MCP (the SDK's own client over streamable HTTP) included."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import anyio
import httpx
import pytest
from ingest_helper import ingest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from processes import PROJECT_ROOT, SearchServer, env_for, run_cli

from search.config import load_settings
from search.errors import BadRequest, NotFound
from search.keys import KEYS_FILE, KeyFile, KeysFileError
from search.services import SearchService
from search.triton.local import free_port

ADMIN = "the-servers-own-admin-key"


def wait_job(get) -> dict:
    """An ingest job's last state, polled with ``get()`` until it ends (at most a minute)."""
    for _ in range(600):
        if (job := get())["state"] in ("done", "failed"):
            return job
        time.sleep(0.1)
    raise AssertionError(f"the job did not end: {job}")


def test_keys_file_hashes_secrets_and_refuses_tampering(tmp_path):
    keys = KeyFile(tmp_path / KEYS_FILE)
    secret = keys.add("hr-bot", ["hr"], "read")
    text = (tmp_path / KEYS_FILE).read_text()
    assert secret.startswith("sk-") and len(secret) > 40 and secret not in text
    assert oct((tmp_path / KEYS_FILE).stat().st_mode & 0o777) == "0o600"
    who = keys.match(secret)
    assert who.name == "hr-bot" and who.kbs == {"hr"} and who.may("hr") and not who.may("eng")
    assert not who.may("hr", "write") and not who.everything
    assert keys.match(secret + "x") is None and keys.match("") is None
    every = KeyFile(tmp_path / KEYS_FILE).match(keys.add("ops", ["*"], "write"))
    assert every.may("eng", "write") and every.may("hr") and not every.may("hr", "admin")
    with pytest.raises(BadRequest, match="exists"):
        keys.add("hr-bot", ["hr"], "read")
    with pytest.raises(BadRequest, match="right"):
        keys.add("x", ["hr"], "root")
    for bad in ("NOT A KB", "Hr", "", "-hr", "hr/eng", "x" * 41):  # the API's rule for a KB's name
        with pytest.raises(BadRequest, match="kb: a knowledge base's name"):
            keys.add("y", ["hr", bad], "read")
    assert [k.listed()["name"] for k in keys.load()] == ["hr-bot", "ops"]
    keys.revoke("ops")
    with pytest.raises(NotFound):
        keys.revoke("ops")

    data = json.loads(text)
    data["keys"][0]["kbs"] = ["hr", "eng"]  # widen a key by hand
    (tmp_path / KEYS_FILE).write_text(json.dumps(data))
    with pytest.raises(KeysFileError, match="checksum"):
        KeyFile(tmp_path / KEYS_FILE).load()
    (tmp_path / KEYS_FILE).write_text("{not json")
    with pytest.raises(KeysFileError, match="not valid JSON"):
        KeyFile(tmp_path / KEYS_FILE).load()
    assert KeyFile(tmp_path / "none.json").load() == []  # not configured: no keys yet
    with pytest.raises(KeysFileError, match="missing"):
        KeyFile(tmp_path / "none.json", required=True).load()
    # A server's keys file that goes away while it runs: refused (503), not a server open to everyone
    running = KeyFile(tmp_path / "running.json")
    running.add("bot", ["*"], "read")
    assert running.exists and not KeyFile(tmp_path / "none.json").exists
    (tmp_path / "running.json").unlink()
    with pytest.raises(KeysFileError, match="removed while"):
        running.load()


def serve_fails(settings, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "search", "serve", "--port", str(free_port())],
                          env=env_for(settings, **env), cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)


def test_a_missing_or_altered_keys_file_stops_the_server_with_one_line(settings, tmp_path):
    r = serve_fails(settings, SEARCH_API_KEYS_FILE=str(tmp_path / "gone.json"))
    assert r.returncode == 5 and "gone.json is missing" in r.stderr and "Traceback" not in r.stderr, r.stderr
    made = run_cli("search", "keys", "add", "bot", "--kb", "hr", settings=settings)
    assert made.returncode == 0, made.stderr
    path = settings.data_dir / KEYS_FILE
    path.write_text(path.read_text().replace('"read"', '"admin"'))
    r = serve_fails(settings)
    assert r.returncode == 5 and "fails its checksum" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len([line for line in r.stderr.splitlines() if line.strip()]) == 1, r.stderr


def test_revoking_the_last_key_keeps_keys_required(settings, tmp_path):
    """A server without SEARCH_API_KEY is open (and says so at start) until a keys file exists; from
    then on it requires keys, also once the last key is revoked (the file is still there, empty). Only
    SEARCH_OPEN_ACCESS opens it again, with a WARNING at start."""
    routes = [("GET", "/status", {}), ("GET", "/watches", {}), ("GET", "/kb", {}),
              ("POST", "/search/documents", {"json": {"query": "handbook"}}), ("POST", "/ingest", {"json": {"paths": ["/"]}}),
              ("POST", "/v1/embeddings", {"json": {"model": "minilm", "input": "x"}})]

    def keyless(server) -> dict[str, int]:
        return {path: httpx.request(method, server.url + path, timeout=60, **kw).status_code for method, path, kw in routes}

    server = SearchServer(settings, tmp_path / "serve.log")
    try:
        assert keyless(server)["/status"] == 200
        key = make_key(settings, "bot", "default", "read")
        assert set(keyless(server).values()) == {401}
        revoked = run_cli("search", "keys", "revoke", "bot", settings=settings)
        assert revoked.returncode == 0 and "no API keys left" in revoked.stderr, revoked.stderr
        assert (settings.data_dir / KEYS_FILE).exists()
        assert keyless(server) == {path: 401 for _, path, _ in routes}
        assert httpx.get(f"{server.url}/status", headers={"X-API-Key": key}, timeout=60).status_code == 401
        assert httpx.get(f"{server.url}/healthz", timeout=60).status_code == 200  # public routes stay public
    finally:
        server.stop()
    log = (tmp_path / "serve.log").read_text()
    assert "INFO search.api: open access: no API key and no keys file" in log, log

    server = SearchServer(settings, tmp_path / "open.log", SEARCH_OPEN_ACCESS="true")
    try:
        assert keyless(server)["/status"] == 200
    finally:
        server.stop()
    log = (tmp_path / "open.log").read_text()
    assert "WARNING search.api: open access (SEARCH_OPEN_ACCESS=true)" in log, log


def write_docs(folder, topic):
    folder.mkdir(parents=True)
    for i in range(3):
        (folder / f"{topic}-{i}.md").write_text(f"# {topic} {i}\n\nThe {topic} handbook, section {i}: holidays and deploys.\n")
    return folder


@pytest.mark.parametrize("value", ["1", "yes", "on"])
def test_only_true_opens_the_server(settings, tmp_path, value):
    """SEARCH_OPEN_ACCESS=1 / yes / on (true to pydantic) stop `search serve` at start with one line
    naming the setting; it never starts open (before: it served every request without a key)."""
    make_key(settings, "bot", "default", "read")
    port = free_port()
    proc = subprocess.run([sys.executable, "-m", "search", "serve", "--port", str(port)], cwd=PROJECT_ROOT,
                          env=env_for(settings, SEARCH_OPEN_ACCESS=value), capture_output=True, text=True, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode != 0 and len(lines) == 1 and "SEARCH_OPEN_ACCESS: must be true or false" in lines[0], proc.stderr
    assert not (settings.data_dir / "server.json").exists()


def test_open_access_is_true_in_any_case(monkeypatch):
    for value, opened in (("TRUE", True), (" True ", True), ("false", False), ("FALSE", False)):
        monkeypatch.setenv("SEARCH_OPEN_ACCESS", value)
        assert load_settings().open_access is opened


def make_key(settings, name, kb, right) -> str:
    r = run_cli("search", "keys", "add", name, "--kb", kb, "--right", right, settings=settings)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


REFUSED = "may not search knowledge base"


def mcp_as(url: str, key: str, calls: list[tuple[str, dict]]) -> tuple[list, dict]:
    """The SDK's client at /mcp with ``key``: each (tool, arguments) called in turn, and the collections resource."""
    async def main():
        http = create_mcp_http_client(headers={"X-API-Key": key})
        async with http, Client(streamable_http_client(f"{url}/mcp", http_client=http), read_timeout_seconds=120) as client:
            assert {t.name for t in (await client.list_tools()).tools} >= {"search_documents", "get_passage", "get_document"}
            results = [await client.call_tool(name, args) for name, args in calls]
            resource = await client.read_resource("search://collections")
            return results, json.loads(resource.contents[0].text)
    return anyio.run(main)


def text_of(result) -> str:
    return "\n".join(c.text for c in result.content if c.type == "text")


def test_a_key_for_hr_never_sees_eng(settings, tmp_path, monkeypatch):
    svc = SearchService(settings)
    hr, eng = write_docs(tmp_path / "hr", "hr"), write_docs(tmp_path / "eng", "eng")
    ingest(svc, [hr], kb="hr")
    ingest(svc, [eng], kb="eng")
    svc.close()
    reader, writer, owner = (make_key(settings, f"hr-{r}", "hr", r) for r in ("read", "write", "admin"))
    listed = run_cli("search", "keys", "list", "--json", settings=settings)
    assert [k["name"] for k in json.loads(listed.stdout)] == ["hr-read", "hr-write", "hr-admin"]
    assert reader not in listed.stdout and reader not in (settings.data_dir / KEYS_FILE).read_text()

    monkeypatch.setenv("SEARCH_API_KEY", ADMIN)
    monkeypatch.setenv("SEARCH_API_ROOTS", json.dumps([str(tmp_path)]))
    server = SearchServer(settings, tmp_path / "serve.log")
    try:
        def call(method, path, key, **kw):
            return httpx.request(method, server.url + path, headers={"X-API-Key": key} if key else {}, timeout=60, **kw)

        def search(key, **body):
            return call("POST", "/search/documents", key, json={"query": "handbook deploys", "top_k": 20, **body})

        # The server's own key sees both.
        both = {h["path"] for kb in ("hr", "eng") for h in search(ADMIN, kb=kb).json()["hits"]}
        assert any("/eng/" in p for p in both) and any("/hr/" in p for p in both)
        # and over MCP: every KB in the resource, eng's passages from the tools
        query = {"query": "handbook deploys", "top_k": 20}
        (admin_eng, admin_doc, elsewhere), admin_kbs = mcp_as(server.url, ADMIN, [
            ("search_documents", {**query, "kb": "eng"}), ("get_document", {"path": str(eng / "eng-0.md"), "kb": "eng"}),
            ("entail", {"photo": "/etc/hostname", "hypothesis": "a dog"})])
        # Even a key over every KB has the server read no file outside the API's roots that is not an
        # indexed photo (REST ingest draws the same line); only the owner's local token may.
        assert elsewhere.is_error and "not a photo of the index" in text_of(elsewhere), text_of(elsewhere)
        assert {k["name"] for k in admin_kbs["knowledge_bases"]} == {"default", "hr", "eng"}
        eng_hits = admin_eng.structured_content["hits"]
        assert eng_hits and all(h["path"].startswith(str(eng)) for h in eng_hits) and "eng handbook" in eng_hits[0]["text"]
        assert not admin_doc.is_error and "eng handbook" in admin_doc.structured_content["text"]
        eng_id = eng_hits[0]["id"]
        seen = []
        for key in (reader, writer, owner):
            for body in ({"kb": "eng"}, {}, {"kb": "default"}, {"kb": "eng", "group_by": "document"},
                         {"kb": "eng", "offset": 3, "top_k": 5}):
                r = search(key, **body)
                assert r.status_code == 403 and "knowledge base" in r.json()["detail"], (body, r.text)
            for body in ({"kb": "hr"}, {"kb": "hr", "group_by": "document", "group_size": 3},
                         {"kb": "hr", "offset": 1, "top_k": 1}):
                r = search(key, **body)
                assert r.status_code == 200, r.text
                seen.append(r.text)
            assert call("POST", "/search/images", key, json={"text": "x", "kb": "eng"}).status_code == 403
            cols = call("GET", "/collections", key).json()
            assert cols["kbs"].keys() == {"hr"} and cols["collections"] == {}
            assert call("GET", "/kb", key).json()["kbs"].keys() == {"hr"}
            seen += [json.dumps(cols)]
            for path in ("/status", "/store/stats", "/watches"):
                assert call("GET", path, key).status_code == 403, path
            assert call("DELETE", "/kb/eng", key).status_code == 403
            # passages by id
            assert call("GET", "/passages", key, params={"path": str(eng / "x.md"), "chunk": 0, "kb": "eng"}).status_code == 403
            assert call("GET", "/documents", key, params={"path": str(eng / "x.md")}).status_code == 403

            # MCP: the same key, the same answers; a KB it may not read is the tool's error, with the 403's words
            refused = [("search_documents", {**query, "kb": "eng"}), ("search_documents", query),
                       ("search_documents", {**query, "kb": "default"}),
                       ("search_documents", {**query, "kb": "eng", "group_by": "document"}),
                       ("search_documents", {**query, "kb": "eng", "offset": 3, "top_k": 5}),
                       ("get_passage", {"id": eng_id, "kb": "eng"}), ("get_passage", {"id": eng_id}),
                       ("get_passage", {"path": str(eng / "eng-0.md"), "chunk": 0, "kb": "eng"}),
                       ("get_document", {"path": str(eng / "eng-0.md"), "kb": "eng"}),
                       ("get_document", {"path": str(eng / "eng-0.md")}),
                       ("search_images", {"text": "x", "kb": "eng"}),
                       ("entail", {"photo": "0" * 64, "hypothesis": "a dog"})]  # an indexed photo: the default KB's
            allowed = [("search_documents", {**query, "kb": "hr"}),
                       ("search_documents", {**query, "kb": "hr", "group_by": "document"}),
                       ("search_documents", {**query, "kb": "hr", "offset": 1, "top_k": 1}),
                       ("get_document", {"path": str(hr / "hr-0.md"), "kb": "hr"}),
                       ("get_passage", {"id": eng_id, "kb": "hr"})]  # eng's id asked of hr: not there
            results, listed_kbs = mcp_as(server.url, key, refused + allowed)
            for (name, args), result in zip(refused, results):
                assert result.is_error and REFUSED in text_of(result), (name, args, text_of(result))
                assert "handbook" not in text_of(result), text_of(result)
            found, grouped, paged, doc, elsewhere = results[len(refused):]
            assert not any(r.is_error for r in (found, grouped, paged, doc)), [text_of(r) for r in (found, grouped, paged, doc)]
            assert found.structured_content["hits"] and all(h["path"].startswith(str(hr)) for h in found.structured_content["hits"])
            assert grouped.structured_content["documents"] and len(paged.structured_content["hits"]) == 1
            assert "hr handbook" in doc.structured_content["text"]
            assert elsewhere.is_error and "no passage" in text_of(elsewhere), text_of(elsewhere)
            assert [k["name"] for k in listed_kbs["knowledge_bases"]] == ["hr"]
            seen += [text_of(r) for r in results] + [json.dumps(listed_kbs)]
        assert seen and not any("/eng/" in text or "eng-" in text or "eng handbook" in text for text in seen)
        assert all(h["path"].startswith(str(hr)) for h in search(reader, kb="hr").json()["hits"])

        # Rights: read cannot ingest; write can, into its KB only; admin can delete its KB only.
        assert call("POST", "/ingest", reader, json={"paths": [str(hr)], "kb": "hr"}).status_code == 403
        assert call("POST", "/ingest", writer, json={"paths": [str(eng)], "kb": "eng"}).status_code == 403
        job = call("POST", "/ingest", writer, json={"paths": [str(hr)], "kb": "hr"})
        assert job.status_code == 202, job.text
        jid = job.json()["job_id"]
        assert [j["id"] for j in call("GET", "/ingest/jobs", writer).json()["jobs"]] == [jid]
        for _ in range(600):
            if call("GET", f"/ingest/jobs/{jid}", writer).json()["state"] in ("done", "failed"):
                break
            time.sleep(0.1)
        assert call("DELETE", "/kb/hr", writer).status_code == 403

        # Uploads are their KB's: no hr key uploads into eng, nor pulls eng's uploads into hr by path.
        secret = {"files": ("eng_salary.md", b"# Salaries\n\nThe eng salary bands are kept in the vault.\n")}
        for key in (reader, writer, owner):
            assert call("POST", "/ingest/upload", key, files=secret, data={"kb": "eng"}).status_code == 403
        up = call("POST", "/ingest/upload", ADMIN, files=secret, data={"kb": "eng"})
        assert up.status_code == 202, up.text
        wait_job(lambda: call("GET", f"/ingest/jobs/{up.json()['job_id']}", ADMIN).json())
        uploads = settings.data_dir / "uploads"
        for key in (writer, owner):
            for path in (uploads, uploads / "eng", *(uploads / "eng").iterdir(), settings.data_dir):
                r = call("POST", "/ingest", key, json={"paths": [str(path)], "kb": "hr"})
                assert r.status_code == 403 and str(tmp_path) not in r.json()["detail"].replace(str(path), ""), r.text
        assert not any("salary" in h["text"] for h in search(owner, kb="hr").json()["hits"])
        assert any("salary" in h["text"] for h in
                   call("POST", "/search/documents", ADMIN, json={"query": "eng salary bands", "kb": "eng"}).json()["hits"])
        assert call("GET", "/collections", None).status_code == 401
        assert call("GET", "/collections", "sk-wrong").status_code == 401

        # A key revoked while the server runs stops working at once.
        assert run_cli("search", "keys", "revoke", "hr-read", settings=settings).returncode == 0
        assert search(reader, kb="hr").status_code == 401
        assert call("DELETE", "/kb/hr", owner).json()["deleted"]["documents"] == 3
        assert search(ADMIN, kb="eng").status_code == 200
    finally:
        server.stop()
    log = (tmp_path / "serve.log").read_text()
    assert writer not in log and owner not in log and ADMIN not in log  # never logged
