"""Typed recipe sections: a dataclass whose fields declare the recipe key each one is (`section.name`) and its one
default, so a key has one name, one default and one validation (the dataclass's `__post_init__`).

`RecipeSection.from_recipe(sections)` builds one from a recipe's nested sections ({"optim": {"lr": ...}}), a value
error naming the recipe key; `to_recipe()` writes it back. Unknown keys are refused with the closest valid name.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable
from dataclasses import field
from typing import Any, TypeVar

T = TypeVar("T", bound="RecipeSection")


def key(name: str, default: Any, doc: str = "") -> Any:
    """A dataclass field that is the recipe key `name` (section.key) with its one default (lists: copied per use)."""
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"key": name, "doc": doc})
    return field(default=default, metadata={"key": name, "doc": doc})


def closest(name: str, known: Iterable[str]) -> str:
    """' (did you mean X?)' for the known name nearest to `name`, or ''."""
    near = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean {near[0]}?)" if near else ""


class RecipeSection:
    """Mixin for a dataclass whose fields are recipe keys (made with `key`)."""

    @classmethod
    def recipe_fields(cls) -> dict[str, tuple[str, str]]:
        """{field: (section, key)} of the fields that are recipe keys."""
        return {f.name: tuple(f.metadata["key"].split(".")) for f in dataclasses.fields(cls)  # type: ignore[arg-type]
                if "key" in f.metadata}

    @classmethod
    def recipe_defaults(cls) -> dict[str, dict[str, Any]]:
        """{section: {key: default}} of the recipe keys."""
        out: dict[str, dict[str, Any]] = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if "key" in f.metadata:
                section, name = f.metadata["key"].split(".")
                default = f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]
                out.setdefault(section, {})[name] = list(default) if isinstance(default, tuple) else default
        return out

    @classmethod
    def from_recipe(cls: type[T], sections: dict[str, Any], **extra: Any) -> T:
        """The section of a recipe's nested dict (missing keys take their defaults); a bad value is a ValueError
        whose message starts with its recipe key."""
        fields = cls.recipe_fields()
        kw = {name: sections[sec][k] for name, (sec, k) in fields.items() if k in sections.get(sec, {})}
        try:
            return cls(**kw, **extra)
        except ValueError as e:
            msg = str(e)
            name = msg.split(" ", 1)[0].split("[", 1)[0]
            raise ValueError(".".join(fields[name]) + msg[len(name):] if name in fields else msg) from e

    def to_recipe(self) -> dict[str, dict[str, Any]]:
        """{section: {key: value}}, as a recipe (and run_config.json) writes it."""
        out: dict[str, dict[str, Any]] = {}
        for name, (sec, k) in self.recipe_fields().items():
            v = getattr(self, name)
            out.setdefault(sec, {})[k] = list(v) if isinstance(v, tuple) else v
        return out
