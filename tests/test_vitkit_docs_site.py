"""The docs site (mkdocs.yml, docs/): it builds in strict mode (a broken link, nav entry or API reference fails), its
generated references hold every command and the public API, and every code block marked `<!-- runnable -->` runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.utils.test_options import cli_reference
from vitkit.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUNNABLE = re.compile(r"^<!-- runnable -->\n```python\n(.*?)^```", flags=re.S | re.M)


def test_site_builds_strict_with_its_references(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mkdocs", reason="the docs extra (make docs) is not installed")
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    monkeypatch.chdir(ROOT)  # the hooks and mkdocstrings' paths are relative to mkdocs.yml
    monkeypatch.setenv("NO_MKDOCS_2_WARNING", "1")
    config = load_config(str(ROOT / "mkdocs.yml"), site_dir=str(tmp_path / "site"))
    assert config.strict  # warnings (broken links, missing nav pages, unresolved references) fail the build
    build(config)
    cli = (tmp_path / "site" / "cli" / "index.html").read_text()
    for prog, _ in cli_reference.walk(build_parser()):
        assert f'id="{prog.replace(" ", "-")}"' in cli, f"the CLI reference has no section for `{prog}`"
    assert "--lora-targets" in cli and "--calibrate" in cli
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    for name in ("vitkit.create_model", "vitkit.load_pretrained", "vitkit.VisionTransformer.forward_intermediates",
                 "vitkit.build_predictor", "vitkit.embed"):
        assert f'id="{name}"' in api, f"the API reference has no entry for {name}"
    assert "<p>" in api.split('id="vitkit.create_model"', 1)[1][:4000]  # its docstring, rendered


def _runnable() -> list[tuple[str, list[str]]]:
    found = [(p.relative_to(ROOT).as_posix(), RUNNABLE.findall(p.read_text())) for p in PAGES]
    return [(where, blocks) for where, blocks in found if blocks]


RUN = _runnable()


def test_some_blocks_are_marked_runnable() -> None:
    assert sum(len(b) for _, b in RUN) >= 3, RUN  # the marker is in use (a rewrite that drops it empties the check)


@pytest.mark.parametrize("where,blocks", RUN, ids=[w for w, _ in RUN])
def test_runnable_blocks_run(where: str, blocks: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A page's marked blocks run in order in one namespace, in a scratch folder."""
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    for i, code in enumerate(blocks):
        exec(compile(code, f"{where} (runnable block {i + 1})", "exec"), namespace)  # noqa: S102


def test_readme_is_short_and_its_links_resolve() -> None:
    """README is the front door (at most 200 lines); it is not part of the site, so its links are checked here."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    targets = [t for t in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text) if not t.startswith(("http:", "https:"))]
    assert "docs/hub.md" in targets and "BENCHMARKS.md" in targets
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"
