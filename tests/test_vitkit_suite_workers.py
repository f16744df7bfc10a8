"""The suite's pytest-xdist workers (tests/suite_workers.py): their shares of the bytecode to write are disjoint and
cover every file, what one writes is what pytest's import hook reads (asserts rewritten), and a worker's process
ends after its exit handlers and exit finalizers ran but without the interpreter's teardown."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from _pytest.assertion import rewrite

from tests.suite_workers import TESTS, my_share, prewrite_bytecode, rewritten_test_modules

ROOT = TESTS.parent


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_the_workers_shares_cover_every_file_once(request: pytest.FixtureRequest, workers: int) -> None:
    files = rewritten_test_modules(request.config, roots=[TESTS])
    names = {p.name for p in files}
    assert {"conftest.py", Path(__file__).name} <= names and not {"helpers.py", "suite_workers.py"} & names
    one = rewritten_test_modules(request.config, roots=[Path(__file__)])  # a run of this file: it and the conftests
    assert {p.name for p in one} == {"conftest.py", Path(__file__).name}, one
    shares = [my_share(files, w, workers) for w in range(workers)]
    assert sorted(p for s in shares for p in s) == sorted(files)  # every file in one share, none twice


def _tree(root: Path) -> tuple[Path, Path]:
    tests, package = root / "tests", root / "pkg"
    for folder in (tests, package):
        folder.mkdir()
    (tests / "conftest.py").write_text("")
    (tests / "test_one.py").write_text("def test_it():\n    x = 1\n    assert x + 1 == 3\n")
    (tests / "helper.py").write_text("assert True\n")  # not a test module: not rewritten
    (package / "mod.py").write_text("VALUE = 7\n")
    return tests, package


def test_what_the_workers_write_is_what_pytest_reads(request: pytest.FixtureRequest, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    tests, package = _tree(tmp_path)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    written = [prewrite_bytecode(request.config, w, 2, tests, package, [tests]) for w in range(2)]
    assert sum(written) == 3 and min(written) >= 1, written  # conftest + test_one + mod.py, shared by the two
    assert [prewrite_bytecode(request.config, w, 2, tests, package, [tests]) for w in range(2)] == [0, 0]  # already fresh
    assert not (tests / "__pycache__" / f"helper{rewrite.PYC_TAIL}").exists()
    fn = tests / "test_one.py"
    co = rewrite._read_pyc(fn, rewrite.get_cache_dir(fn) / f"test_one{rewrite.PYC_TAIL}")
    assert co is not None, "pytest's import hook would not read the written cache"
    space: dict = {}
    exec(co, space)
    with pytest.raises(AssertionError, match=r"assert \(1 \+ 1\) == 3"):  # rewritten: the values are in the message
        space["test_it"]()
    cached = Path(importlib.util.cache_from_source(str(package / "mod.py")))
    assert cached.is_file()


def test_nothing_is_written_where_python_writes_no_bytecode(request: pytest.FixtureRequest, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    tests, package = _tree(tmp_path)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert prewrite_bytecode(request.config, 0, 1, tests, package, [tests]) == 0
    assert not list(tmp_path.rglob("__pycache__"))


def test_a_worker_ends_after_its_exit_handlers_without_the_teardown(tmp_path: Path) -> None:
    """Registered first, it runs last: the handlers registered after it ran, the finalizers marked for exit ran (a
    TemporaryDirectory left open is removed), logging was flushed; an object freed only by the interpreter's
    teardown is not (its __del__ does not run), and the exit status is 0."""
    code = f"""
import atexit, logging, logging.handlers, tempfile
from pathlib import Path
from tests.suite_workers import _exit_without_teardown
out = Path({str(tmp_path)!r})
left_open = tempfile.TemporaryDirectory(dir=out)  # (weakref's exit handler registered before, as in a worker)
atexit.register(_exit_without_teardown)
(out / "tmpdir").write_text(left_open.name)
target = logging.FileHandler(out / "log.txt")
logging.getLogger("t").addHandler(logging.handlers.MemoryHandler(100, target=target))
logging.getLogger("t").warning("buffered until logging.shutdown")
atexit.register(lambda: (out / "later_handler").write_text("ran"))
class FreedAtTeardown:  # (what __del__ needs bound now: the teardown clears the modules' names first)
    def __del__(self, write=Path.write_text, path=out / "teardown"):
        write(path, "ran")
kept = FreedAtTeardown()
"""
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "later_handler").read_text() == "ran"
    assert not Path((tmp_path / "tmpdir").read_text()).exists()
    assert "buffered until logging.shutdown" in (tmp_path / "log.txt").read_text()
    assert not (tmp_path / "teardown").exists(), "the interpreter's teardown ran"
