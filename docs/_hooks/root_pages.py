"""mkdocs hook: the reports kept at the repository root (BENCHMARKS.md, CHANGELOG.md) as pages of the site, read from
where they live (one copy; the site is never a second one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PAGES = {"benchmarks.md": "BENCHMARKS.md", "changelog.md": "CHANGELOG.md"}


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for page, source in PAGES.items():
        files.append(File.generated(config, page, abs_src_path=str(ROOT / source)))
    return files
