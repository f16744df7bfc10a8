"""A Hugging Face hub on 127.0.0.1 and a hub cache on disk, for tests that must not touch the internet.

`FakeHub` serves the endpoints huggingface_hub (the venv's version; read in its hf_api.py / file_download.py) calls
for `snapshot_download`: `GET /api/models/{repo}/revision/{rev}` (repo info: `sha`), `GET
/api/models/{repo}/tree/{commit}` (the file list), `HEAD` / `GET /{repo}/resolve/{rev}/{file}` with `X-Repo-Commit`,
`ETag` and `Content-Length`; safetensors files as the hub serves LFS files: a 302 with `Location`, `X-Linked-Etag`
(the sha256) and `X-Linked-Size`, the bytes at the redirect's target (on "localhost": another host name, which
huggingface_hub does not follow for metadata, as it does not follow the hub's CDN), byte ranges honoured
(huggingface_hub's retry of a broken body). Errors carry the hub's `X-Error-Code` (RepoNotFound, RevisionNotFound,
EntryNotFound); a private repo answers 401 without the right token; `drop` names files whose body is cut off mid-way
(a dropped connection). Every request is recorded in `requests` (method, path).

Uploads take the calls huggingface_hub's `create_repo` / `create_branch` / `create_commit` make (read in the venv's
hf_api.py and _commit_api.py): `POST /api/repos/create` (409 with the repo's `url` when it exists), `POST
/api/validate-yaml` (a README.md's metadata: its front matter must open and close with `---`), `POST
/api/models/{repo}/branch/{branch}`, `POST /api/models/{repo}/preupload/{rev}` (every file "regular", so no LFS
transfer follows) and `POST /api/models/{repo}/commit/{rev}` (NDJSON: a header, then each file base64), which makes a
new commit on the branch. Writing needs a token in `writers` (else 401, as the hub answers a missing token).

`hub_cache` writes a repo into a cache folder in huggingface_hub's own layout
(`models--org--name/{refs,snapshots,blobs}`, snapshot files symlinked to their blobs), as a download leaves it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest


def git_sha1(data: bytes) -> str:
    """The git blob id of `data`: the hub's ETag of a file kept in git."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def is_lfs(name: str) -> bool:
    return name.endswith((".safetensors", ".bin"))


def etag(name: str, data: bytes) -> str:
    """The hub's ETag: sha256 for LFS files (weights), the git blob id otherwise."""
    return hashlib.sha256(data).hexdigest() if is_lfs(name) else git_sha1(data)


def folder_files(folder: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(folder.iterdir()) if f.is_file()}


def commit_id(files: dict[str, bytes], salt: str = "") -> str:
    h = hashlib.sha1(salt.encode())
    for name, data in sorted(files.items()):
        h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


def hub_cache(cache: Path, repo_id: str, files: dict[str, bytes], refs: tuple[str, ...] = ("main",)) -> Path:
    """Write `files` as commit of `repo_id` into the hub cache `cache` (huggingface_hub's layout); returns the
    snapshot folder."""
    commit = commit_id(files)
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for name, data in files.items():
        tag = etag(name, data)
        (repo / "blobs" / tag).write_bytes(data)
        os.symlink(f"../../blobs/{tag}", snap / name)
    (repo / "refs").mkdir(exist_ok=True)
    for ref in refs:
        (repo / "refs" / ref).write_text(commit)
    return snap


class FakeHub:
    """A hub endpoint on 127.0.0.1 (see the module's docstring); use as a context manager."""

    def __init__(self) -> None:
        self.repos: dict[str, dict[str, dict[str, bytes]]] = {}  # repo -> commit -> files
        self.refs: dict[str, dict[str, str]] = {}  # repo -> branch / tag -> commit
        self.private: dict[str, str] = {}  # repo -> the token that may read it
        self.drop: set[str] = set()  # file names whose body is cut off mid-way
        self.writers: set[str] = {"hf_writer"}  # tokens that may create repos and commit
        self.commits: list[dict[str, object]] = []  # each commit's header (summary, ...), repo, branch and files
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.cdn = f"http://localhost:{self.server.server_address[1]}"  # another host name, as the hub's CDN is
        # (shutdown() returns once serve_forever next polls its flag: each test's teardown waited up to this long)
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)

    def add(self, repo_id: str, files: dict[str, bytes], ref: str = "main", salt: str = "") -> str:
        """Publish `files` as a new commit of `repo_id` and point `ref` at it; returns the commit id."""
        commit = commit_id(files, salt)
        self.repos.setdefault(repo_id, {})[commit] = dict(files)
        self.refs.setdefault(repo_id, {})[ref] = commit
        return commit

    def count(self, kind: str = "") -> int:
        """Requests recorded whose path contains `kind` ("/resolve/", "/api/", "/cdn/")."""
        with self._lock:
            return sum(kind in path for _, path in self.requests)

    def __enter__(self) -> FakeHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # TCP_NODELAY: a response's headers and body are separate writes on a kept-alive connection; with Nagle's
            # algorithm the body waited for the client's delayed ACK (~40 ms a request, ~0.8 s in a push test)
            disable_nagle_algorithm = True

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:  # noqa: N802
                self._serve(body=False)

            def do_GET(self) -> None:  # noqa: N802
                self._serve(body=True)

            def do_POST(self) -> None:  # noqa: N802
                path = unquote(urlsplit(self.path).path)
                data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with hub._lock:
                    hub.requests.append((self.command, path))
                if path == "/api/validate-yaml":  # a README.md's metadata, checked before anything is uploaded
                    text = json.loads(data)["content"]
                    ok = not text.startswith("---") or "\n---\n" in text[3:]
                    self._send(200 if ok else 400, {"Content-Type": "application/json"}, json.dumps(
                        {"errors": [] if ok else [{"message": "unclosed metadata"}], "warnings": []}).encode())
                    return
                token = (self.headers.get("authorization") or "").removeprefix("Bearer ")
                if token not in hub.writers:
                    self._error(401, "Unauthorized")  # the hub's answer to a write without a (write) token
                    return
                if path == "/api/repos/create":
                    doc = json.loads(data)
                    repo_id = f"{doc['organization']}/{doc['name']}"
                    url = f"{hub.url}/{repo_id}"
                    if repo_id in hub.repos:
                        self._send(409, {"Content-Type": "application/json"}, json.dumps(
                            {"error": "You already created this model repo", "url": url}).encode())
                        return
                    hub.add(repo_id, {".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"})
                    if doc.get("visibility") == "private" or doc.get("private"):
                        hub.private[repo_id] = token
                    self._send(200, {"Content-Type": "application/json"}, json.dumps({"url": url}).encode())
                    return
                m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/(branch|preupload|commit)/(.+)", path)
                if not m:
                    self._error(404, "NotFound")
                    return
                repo_id, what, rev = m.groups()
                found = self._repo(repo_id, "main" if what == "branch" else rev)
                if not found:
                    return
                if what == "branch":
                    if rev in hub.refs[repo_id]:
                        self._error(409, "Conflict")
                        return
                    start = json.loads(data or b"{}").get("startingPoint") or "main"
                    hub.refs[repo_id][rev] = hub.refs[repo_id].get(start, start)
                    self._send(200, {"Content-Type": "application/json"}, b"{}")
                elif what == "preupload":  # every file a regular git file: its bytes come in the commit itself
                    files = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": None}
                             for f in json.loads(data)["files"]]
                    self._send(200, {"Content-Type": "application/json"}, json.dumps({"files": files}).encode())
                else:
                    if rev not in hub.refs[repo_id]:  # a commit goes onto a branch
                        self._error(404, "RevisionNotFound")
                        return
                    parent, files = found
                    lines = [json.loads(line) for line in data.splitlines() if line.strip()]
                    added = {d["value"]["path"]: base64.b64decode(d["value"]["content"]) for d in lines
                             if d["key"] == "file"}
                    if any(d["key"] not in ("header", "file") for d in lines):
                        self._error(400, "BadRequest")  # LFS pointers or deletions: never asked for here
                        return
                    with hub._lock:
                        commit = hub.add(repo_id, {**files, **added}, ref=rev, salt=parent)
                        hub.commits.append({"repo": repo_id, "branch": rev, "files": sorted(added),
                                            **lines[0]["value"]})
                    self._send(200, {"Content-Type": "application/json"}, json.dumps(
                        {"commitUrl": f"{hub.url}/{repo_id}/commit/{commit}", "commitOid": commit,
                         "success": True}).encode())

            def _send(self, code: int, headers: dict[str, str], data: bytes = b"", body: bool = True) -> None:
                self.send_response(code)
                for k, v in headers.items():
                    self.send_header(k, v)
                if "Content-Length" not in headers:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body and data:
                    self.wfile.write(data)

            def _error(self, code: int, error: str, commit: str | None = None) -> None:
                headers = {"X-Error-Code": error, "X-Error-Message": error, "Content-Type": "application/json"}
                if commit:
                    headers["X-Repo-Commit"] = commit
                self._send(code, headers, json.dumps({"error": error}).encode())

            def _repo(self, repo_id: str, rev: str) -> tuple[str, dict[str, bytes]] | None:
                """(commit, files) of repo_id at rev, or None after answering the error."""
                if repo_id not in hub.repos:
                    self._error(404, "RepoNotFound")
                    return None
                want = hub.private.get(repo_id)
                if want is not None and self.headers.get("authorization") != f"Bearer {want}":
                    self._error(401, "RepoNotFound")  # the hub's answer for a private repo without access
                    return None
                commit = hub.refs[repo_id].get(rev, rev)
                if commit not in hub.repos[repo_id]:
                    self._error(404, "RevisionNotFound")
                    return None
                return commit, hub.repos[repo_id][commit]

            def _serve(self, body: bool) -> None:
                path = unquote(urlsplit(self.path).path)
                with hub._lock:
                    hub.requests.append((self.command, path))
                m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/revision/(.+)", path)
                if m:
                    found = self._repo(m.group(1), m.group(2))
                    if found:
                        commit, files = found
                        doc = {"id": m.group(1), "modelId": m.group(1), "sha": commit, "private": False,
                               "siblings": [{"rfilename": n} for n in files]}
                        self._send(200, {"Content-Type": "application/json"}, json.dumps(doc).encode(), body)
                    return
                m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)", path)
                if m:
                    found = self._repo(m.group(1), m.group(2))
                    if found:
                        _, files = found
                        doc = [{"type": "file", "path": n, "size": len(d), "oid": git_sha1(d),
                                **({"lfs": {"oid": hashlib.sha256(d).hexdigest(), "size": len(d),
                                            "pointerSize": 134}} if is_lfs(n) else {})} for n, d in files.items()]
                        self._send(200, {"Content-Type": "application/json"}, json.dumps(doc).encode(), body)
                    return
                m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
                if m:
                    found = self._repo(m.group(1), m.group(2))
                    if not found:
                        return
                    commit, files = found
                    name = m.group(3)
                    if name not in files:
                        self._error(404, "EntryNotFound", commit)
                        return
                    data = files[name]
                    if is_lfs(name):  # LFS: a redirect to the blob, the file's metadata on the redirect itself
                        sha = hashlib.sha256(data).hexdigest()
                        self._send(302, {"Location": f"{hub.cdn}/cdn/{m.group(1)}/{sha}", "X-Repo-Commit": commit,
                                         "X-Linked-Etag": f'"{sha}"', "X-Linked-Size": str(len(data)),
                                         "ETag": f'"{git_sha1(data)}"'}, b"", body)
                        return
                    self._send(200, {"X-Repo-Commit": commit, "ETag": f'"{git_sha1(data)}"',
                                     "Content-Type": "application/octet-stream"}, data, body)
                    return
                m = re.fullmatch(r"/cdn/([^/]+/[^/]+)/([0-9a-f]{64})", path)
                if m:
                    blobs = {hashlib.sha256(d).hexdigest(): (n, d) for c in hub.repos.get(m.group(1), {}).values()
                             for n, d in c.items()}
                    if m.group(2) not in blobs:
                        self._error(404, "EntryNotFound")
                        return
                    name, data = blobs[m.group(2)]
                    start = 0
                    rng = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
                    if rng:
                        start = int(rng.group(1))
                    part = data[start:]
                    headers = {"ETag": f'"{m.group(2)}"', "Content-Length": str(len(part)),
                               "Content-Type": "application/octet-stream"}
                    if rng:
                        headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
                    self.send_response(206 if rng else 200)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    if not body:
                        return
                    if name in hub.drop:  # a dropped connection: half the body, then the socket closes
                        self.wfile.write(part[: max(1, len(part) // 2)])
                        self.wfile.flush()
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return
                    self.wfile.write(part)
                    return
                self._error(404, "NotFound")

        return Handler


@pytest.fixture(name="hub")
def hub_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201 - a generator fixture
    """A FakeHub as huggingface_hub's endpoint, a fresh cache in tmp_path/hf-cache, online, no token.

    huggingface_hub reads HF_ENDPOINT / HF_HUB_CACHE / HF_HUB_OFFLINE into `huggingface_hub.constants` when it is
    imported, so the test sets those constants (the subprocess tests set the environment variables instead)."""
    constants = pytest.importorskip("huggingface_hub.constants")
    with FakeHub() as server:
        monkeypatch.setattr(constants, "ENDPOINT", server.url)
        template = server.url + "/{repo_id}/resolve/{revision}/{filename}"
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))
        monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "hf-home" / "stored_tokens"))
        for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
            monkeypatch.delenv(var, raising=False)
        for var in ("NO_PROXY", "no_proxy"):
            monkeypatch.setenv(var, "127.0.0.1,localhost")
        yield server
