"""tests/ mirrors vitkit/ (issue 55 item 4): every test file is `tests/<package path>/test_<module>[_<aspect>].py`
where `vitkit/<package path>/<module>.py` exists.

A package's `__init__.py` takes the package's own name (tests/bench/test_bench.py for vitkit/bench/__init__.py,
tests/commands/test_commands_<aspect>.py for a rule every command keeps), and so does vitkit's own: tests that
cross packages (tests/test_vitkit_composition.py) or check the whole tree (this file) are tests/test_vitkit_*.py.
`<aspect>` splits a big module's tests by topic (tests/formats/test_hub_push.py tests vitkit/formats/hub.py's push);
an aspect after the package's name may not be one of its modules (test_formats_hf.py is test_hf.py). A private
module's leading underscore is dropped (test_run_args.py for vitkit/commands/_run_args.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import vitkit

TESTS = Path(__file__).resolve().parent
PACKAGE = Path(vitkit.__file__).resolve().parent
NOT_MODULES = {"__init__", "__main__"}


def _names(package: Path, top: bool) -> tuple[str, list[str]]:
    """The package's own name (a test of its `__init__.py`) and its modules' names, as a test file spells them."""
    own = "vitkit" if top else package.name
    modules = sorted(p.stem.lstrip("_") for p in package.glob("*.py") if p.stem not in NOT_MODULES)
    return own, modules


def _matches(stem: str, name: str) -> bool:
    return stem == name or stem.startswith(name + "_")


def misnamed(tests: Path, package: Path) -> list[str]:
    """One line for each test file under `tests` that names no module of `package`, with the names it could take."""
    problems = []
    for path in sorted(tests.rglob("test_*.py")):
        rel = path.relative_to(tests)
        where = package.joinpath(*rel.parent.parts)
        if not (where / "__init__.py").is_file():
            packages = sorted(str(p.parent.relative_to(package)) for p in package.rglob("__init__.py")
                              if p.parent != package)
            problems.append(f"tests/{rel}: there is no package {package.name}/{rel.parent}; test folders mirror the "
                            f"packages: tests/ or tests/<one of {', '.join(packages)}>")
            continue
        own, modules = _names(where, top=where == package)
        stem = path.stem[len("test_"):]
        hint = f"test_<one of {', '.join([own, *modules])}>[_<aspect>].py"
        if _matches(stem, own):
            aspect = stem[len(own) + 1:]
            shadowed = [m for m in modules if _matches(aspect, m)]
            if shadowed:
                module = max(shadowed, key=len)
                problems.append(f"tests/{rel}: '{aspect}' is the module {where.relative_to(package.parent)}/"
                                f"{module}.py; name it test_{aspect}.py")
        elif not any(_matches(stem, m) for m in modules):
            problems.append(f"tests/{rel}: no module {where.relative_to(package.parent)}/{stem}.py (nor one its "
                            f"name starts with); name it {hint}")
    return problems


def test_every_test_file_is_named_after_a_module_of_vitkit() -> None:
    problems = misnamed(TESTS, PACKAGE)
    assert not problems, "test files that do not mirror vitkit/:\n" + "\n".join(problems)


def _tree(root: Path, files: list[str]) -> None:
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")


@pytest.fixture
def fake(tmp_path: Path) -> tuple[Path, Path]:
    """A small package (`vitkit/{__init__,cli,_args}.py`, `vitkit/formats/{__init__,hf,hf_families}.py`) and tests."""
    package, tests = tmp_path / "vitkit", tmp_path / "tests"
    _tree(package, ["__init__.py", "__main__.py", "cli.py", "_args.py", "formats/__init__.py", "formats/hf.py",
                    "formats/hf_families.py"])
    _tree(tests, ["__init__.py", "test_cli.py", "test_cli_errors.py", "test_vitkit_composition.py", "test_args.py",
                  "formats/__init__.py", "formats/test_hf.py", "formats/test_hf_families.py",
                  "formats/test_hf_push.py", "formats/test_formats_hardening.py", "formats/helpers.py"])
    return tests, package


def test_a_tree_that_mirrors_its_package_passes(fake: tuple[Path, Path]) -> None:
    assert misnamed(*fake) == []


@pytest.mark.parametrize(("bad", "says"), [
    ("formats/test_family_rules.py", ["tests/formats/test_family_rules.py: no module vitkit/formats/family_rules.py",
                                      "test_<one of formats, hf, hf_families>[_<aspect>].py"]),
    ("test_composition.py", ["tests/test_composition.py: no module vitkit/composition.py",
                             "test_<one of vitkit, args, cli>[_<aspect>].py"]),
    ("test_main.py", ["no module vitkit/main.py"]),
    ("cli/test_errors.py", ["tests/cli/test_errors.py: there is no package vitkit/cli",
                            "tests/ or tests/<one of formats>"]),
    ("formats/test_formats_hf.py", ["tests/formats/test_formats_hf.py: 'hf' is the module vitkit/formats/hf.py",
                                    "name it test_hf.py"]),
    ("formats/test_formats_hf_families_rules.py", ["vitkit/formats/hf_families.py",
                                                   "name it test_hf_families_rules.py"]),
])
def test_a_file_named_after_no_module_is_named_with_the_names_it_could_take(
        fake: tuple[Path, Path], bad: str, says: list[str]) -> None:
    tests, package = fake
    _tree(tests, [bad])
    problems = misnamed(tests, package)
    assert len(problems) == 1, problems
    for words in says:
        assert words in problems[0]
