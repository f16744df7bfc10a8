"""Hugging Face hub ids wherever a checkpoint path is accepted: one function, `resolve_checkpoint`, turns
"facebook/dinov2-small" (with a `revision`: branch, tag or commit) into a snapshot folder of huggingface_hub's cache.

Everything goes through huggingface_hub, the field's client: its cache layout (`models--org--name/{refs,snapshots,
blobs}` under `HF_HUB_CACHE`, default `HF_HOME/hub`), `HF_ENDPOINT`, `HF_HUB_OFFLINE`, the token of `hf auth login`
or `HF_TOKEN`, its retries of a broken download. Only the files the loaders read are fetched (`ALLOW_PATTERNS`: the
configs and the safetensors weights, whole or sharded); pickled weights (pytorch_model.bin) only with
`allow_pickle=True`, and they are then read as every local .bin is, with `torch.load(weights_only=True)`. The
snapshot is loaded as any folder is, by the same checks (formats/__init__.py: `load_pretrained`), so a tampered
cache fails as a tampered folder does.

A local path that exists always wins over a hub id of the same spelling (said in the log); a path whose first
component is a local folder, or that names a checkpoint file (.npz, .safetensors, ...), is never sent to the hub.
Each failure is one line naming the repo, the revision and what to do (docs/hub.md).

Publishing (`push_folder`) is huggingface_hub's too: `HfApi.create_repo` (exist_ok), `create_branch` for a branch
other than main, one `create_commit` of the folder's files (and its model card); the token is huggingface_hub's.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

log = logging.getLogger("vitkit")

#: "org/name": huggingface_hub's repo id spelling (no "--", no "..", not a leading or trailing "." or "-")
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}")
#: the files every folder format vitkit reads may need (hf, timm and vitkit folders; formats/sharded.py's names)
ALLOW_PATTERNS = ["config.json", "preprocessor_config.json", "model.safetensors", "model.safetensors.index.json",
                  "model-*-of-*.safetensors"]
#: pickled weights: fetched only with allow_pickle=True, read with torch.load(weights_only=True)
PICKLE_PATTERNS = ["pytorch_model.bin", "pytorch_model.bin.index.json", "pytorch_model-*-of-*.bin"]
#: a name ending so is a file the user means, not a repo: never sent to the hub
FILE_SUFFIXES = (".npz", ".safetensors", ".pth", ".pt", ".bin", ".ckpt", ".json")


def spelled_as_repo_id(text: str) -> bool:
    """Whether `text` is spelled as huggingface_hub spells a repo id ("org/name"; see `HUB_ID`)."""
    return bool(HUB_ID.fullmatch(text)) and "--" not in text and ".." not in text and not text.endswith((".", "-"))


def is_hub_id(path: str | Path) -> bool:
    """Whether `path` is spelled as a hub repo id ("org/name") that is not a local path (see the module's rules)."""
    text = str(path)
    if not spelled_as_repo_id(text):
        return False
    if text.lower().endswith(FILE_SUFFIXES):
        return False
    return not Path(text.split("/", 1)[0]).is_dir()  # "runs/modle" beside a runs/ folder: a local typo


def resolve_checkpoint(path: str | Path, revision: str | None = None, allow_pickle: bool = False) -> Path:
    """The local path to load for `path`: itself when it exists (or is not a hub id), else the snapshot folder of
    hub repo `path` at `revision` (default "main") in huggingface_hub's cache, downloaded when missing.

    Raises FileNotFoundError / ConnectionError with one line naming the repo, the revision, the cache folder and
    HF_HUB_OFFLINE (offline and not cached), or whether a token is set (401 / 404)."""
    p = Path(path)
    if p.exists() or p.is_symlink() or not is_hub_id(path):
        if revision is not None:
            what = "a local path" if p.exists() else "not a hub id (org/name)"
            raise ValueError(f"{path}: revision={revision!r} names a version of a hub repo, and {path} is {what} "
                             "(a local path always wins over a hub id of the same spelling): drop the revision")
        if p.exists() and HUB_ID.fullmatch(str(path)):
            log.info("%s: the local path (not the Hugging Face hub id of the same spelling)", path)
        return p
    return Path(download_snapshot(str(path), revision, allow_pickle))


def download_snapshot(repo_id: str, revision: str | None = None, allow_pickle: bool = False) -> str:
    """`huggingface_hub.snapshot_download` of the files vitkit reads; its errors in one line each."""
    try:
        import huggingface_hub
    except ImportError as e:  # a runtime dependency; said plainly where an environment lacks it
        raise ModuleNotFoundError(f"{repo_id}: loading a hub id needs huggingface_hub (pip install "
                                  "huggingface_hub); or download the folder and load its path") from e
    from huggingface_hub import constants, errors

    rev = revision or constants.DEFAULT_REVISION
    patterns = ALLOW_PATTERNS + (PICKLE_PATTERNS if allow_pickle else [])
    where = f"{repo_id} (revision {rev})"
    cache = constants.HF_HUB_CACHE
    try:
        # offline said to huggingface_hub in so many words: some 1.x releases list a commit's files over the network
        # under HF_HUB_OFFLINE (and fail) instead of reading the cached snapshot
        folder = huggingface_hub.snapshot_download(repo_id, revision=revision, allow_patterns=patterns,
                                                   library_name="vitkit", local_files_only=constants.HF_HUB_OFFLINE)
    except getattr(errors, "IncompleteSnapshotError", ()) as e:  # huggingface_hub 1.x: a partial snapshot
        missing = re.search(r"missing \(([^)]*)\)", str(e))
        raise FileNotFoundError(f"{where}: the cached snapshot in {cache} is incomplete (missing "
                                f"{missing.group(1) if missing else 'files'}) and {_offline_or_unreachable(e)}; run "
                                "again online to complete it") from e
    except errors.LocalEntryNotFoundError as e:
        raise FileNotFoundError(f"{where}: not a local path, not in the Hugging Face cache {cache}, and "
                                f"{_offline_or_unreachable(e)}") from e
    except errors.RevisionNotFoundError as e:
        raise FileNotFoundError(f"{repo_id}: no revision {rev!r} (branch, tag or commit) on {constants.ENDPOINT}"
                                ) from e
    except errors.HfHubHTTPError as e:
        code = e.response.status_code if e.response is not None else None
        if isinstance(e, errors.RepositoryNotFoundError) or code in (401, 403, 404):
            raise FileNotFoundError(f"{where}: not a local path, and {constants.ENDPOINT} has no such repo or "
                                    f"refuses access (HTTP {code}); {_token_note()}") from e
        raise ConnectionError(f"{where}: {constants.ENDPOINT} answered HTTP {code}; nothing was loaded: try again "
                              f"later (the cache is {cache})") from e
    except Exception as e:  # a download that broke off (dropped connection, size mismatch)
        if not isinstance(e, OSError) and not type(e).__module__.startswith("httpx"):  # (httpx's are not OSErrors)
            raise
        raise ConnectionError(f"{where}: the download from {constants.ENDPOINT} broke off ({_cause(e)}, after "
                              "huggingface_hub's own retries); run again: the files it finished stay in the cache "
                              f"{cache}") from e
    _check_weights(Path(folder), where, allow_pickle)
    log.info("%s: the Hugging Face hub repo, snapshot %s", where, folder)
    return folder


def _check_weights(folder: Path, where: str, allow_pickle: bool) -> None:
    """A snapshot without weights the loaders read: say whether pickled weights were left out."""
    names = {f.name for f in folder.iterdir()}
    if names & {"model.safetensors", "model.safetensors.index.json"} or (allow_pickle and names & {
            "pytorch_model.bin", "pytorch_model.bin.index.json"}):
        return
    fetched = ", ".join(sorted(names)) or "nothing"
    if not allow_pickle:
        raise FileNotFoundError(f"{where}: no safetensors weights in the repo (fetched: {fetched}); if it ships "
                                "pickled ones (pytorch_model.bin), pass allow_pickle=True (--allow-pickle): they are "
                                "read with torch.load(weights_only=True)")
    raise FileNotFoundError(f"{where}: no weights vitkit reads in the repo (fetched: {fetched}; it reads "
                            "model.safetensors, pytorch_model.bin or their sharded index)")


def _offline_or_unreachable(e: BaseException) -> str:
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE=1 forbids downloading it: run once without HF_HUB_OFFLINE, or load a local folder"
    cause = e.__cause__ or e.__context__
    why = f" ({_cause(cause)})" if cause is not None else ""
    return f"{constants.ENDPOINT} could not be reached{why} (HF_HUB_OFFLINE is not set)"


def _cause(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return f"{type(e).__name__}: {text[:160]}"


def _token_note(write: bool = False) -> str:
    from huggingface_hub import get_token

    try:
        token = get_token()
    except Exception:  # noqa: BLE001 - an unreadable token store is the same as none, for this message
        token = None
    if write:
        return ("a token is set (HF_TOKEN or hf auth login): check that it may write to the repo's namespace"
                if token else "no token is set: log in (hf auth login) or set HF_TOKEN to a token with write access")
    if token:
        return "a token is set (HF_TOKEN or hf auth login): check the repo id and that the token can read it"
    return "no token is set: check the repo id, or log in (hf auth login, or HF_TOKEN) for a private or gated repo"



def push_folder(folder: str | Path, repo_id: str, *, card: str | None = None, revision: str | None = None,
                private: bool = False, commit_message: str | None = None) -> str:
    """Upload the files of the checkpoint folder `folder` (and `card` as its README.md when it keeps none) to the
    hub repo `repo_id` on branch `revision` (default main; created from main when missing), creating the repo
    (`private`) when missing; returns the new commit's id. Hidden files (an interrupted write's `.*.tmp`) stay
    behind; a symbolic link is refused (it could publish a file from outside the folder)."""
    import huggingface_hub
    from huggingface_hub import CommitOperationAdd, constants, errors

    if not spelled_as_repo_id(repo_id):
        raise ValueError(f"{repo_id!r}: not a hub repo id; write it org/name (your user or organization, a slash, "
                         "the repo's name: letters, digits, '-', '_', '.')")
    folder = Path(folder)
    files: list[Path] = []
    for f in sorted(folder.rglob("*")):
        rel = f.relative_to(folder)
        if any(part.startswith(".") for part in rel.parts):
            continue
        if f.is_symlink():
            raise ValueError(f"{f}: a symbolic link; push uploads the folder's own files: copy the file in instead")
        if f.is_file():
            files.append(rel)
    branch = revision or constants.DEFAULT_REVISION
    where = f"{repo_id} (branch {branch})"
    if constants.HF_HUB_OFFLINE:
        raise ConnectionError(f"{where}: HF_HUB_OFFLINE=1 forbids uploading; unset it to push")
    ops = [CommitOperationAdd(path_in_repo=rel.as_posix(), path_or_fileobj=str(folder / rel)) for rel in files]
    if card is not None and Path("README.md") not in files:
        ops.append(CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=card.encode("utf-8")))
    message = commit_message or f"Upload {folder.name} with vitkit"
    api = huggingface_hub.HfApi(library_name="vitkit")
    try:
        api.create_repo(repo_id, private=private or None, exist_ok=True)
        if branch != constants.DEFAULT_REVISION:
            api.create_branch(repo_id, branch=branch, exist_ok=True)
        info = api.create_commit(repo_id, ops, commit_message=message, revision=revision)
    except errors.HfHubHTTPError as e:
        code = e.response.status_code if e.response is not None else None
        if code in (401, 403):
            raise ValueError(f"{where}: {constants.ENDPOINT} refused the upload (HTTP {code}); "
                             f"{_token_note(write=True)}") from e
        raise ConnectionError(f"{where}: {constants.ENDPOINT} answered HTTP {code} to the upload "
                              f"({_cause(e)}); nothing was committed") from e
    except Exception as e:  # an unreachable endpoint (httpx's errors are not OSErrors)
        if not isinstance(e, OSError) and not type(e).__module__.startswith("httpx"):
            raise
        raise ConnectionError(f"{where}: {constants.ENDPOINT} could not be reached ({_cause(e)}); nothing was "
                              "committed") from e
    log.info("%s: %d files committed as %s (%s)", where, len(ops), info.oid, info.commit_url)
    return str(info.oid)
