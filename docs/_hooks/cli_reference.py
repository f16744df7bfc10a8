"""mkdocs hook: the CLI reference page (`cli.md`), generated at build time from vitkit's own argparse parser
(`vitkit.cli.build_parser`), so the page is every subcommand and option as `vitkit CMD --help` prints them.

`walk` is the one walk over the parser: this page and the help-text test (tests/utils/test_options.py) use it."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

PAGE = "cli.md"


def walk(parser: argparse.ArgumentParser, prog: str = "vitkit") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(command line, parser) for `parser` and every subcommand below it, depth first, in the parser's order."""
    yield prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk(sub, f"{prog} {name}")


def help_texts(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str, str]]:
    """(command line, what, text) for every description, subcommand summary and option help a user can read."""
    for prog, p in walk(parser):
        if p.description:
            yield prog, "description", p.description
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    if choice.help:
                        yield f"{prog} {choice.dest}", "summary", choice.help
            elif action.help and action.help != argparse.SUPPRESS:
                yield prog, "/".join(action.option_strings) or action.dest, action.help


def _cell(text: str) -> str:
    """Text for a Markdown table cell: one line, no table or HTML syntax."""
    return " ".join(str(text).split()).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("*", "\\*")


def _option(action: argparse.Action) -> tuple[str, str, str]:
    names = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.metavar or action.dest}`"
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        value = " \\| ".join(f"`{c}`" for c in action.choices)
    elif action.nargs == 0:
        value = ""
    else:
        metavar = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
        value = f"`{metavar}`" + (" ..." if action.nargs in ("+", "*") else "")
    default = action.default
    shown = "" if default in (None, False, argparse.SUPPRESS) or action.nargs == 0 else f"`{default}`"
    return names, value, _cell(action.help or "") + (f" (default {shown})" if shown and "default" not in (action.help or "") else "")


def markdown(parser: argparse.ArgumentParser) -> str:
    """The CLI reference as Markdown: one section per (sub)command, its description and a table of its arguments."""
    out = ["# Command-line reference", "",
           "Generated from the parser when the site is built: each section is what `--help` prints for that command.",
           ""]
    for prog, p in walk(parser):
        level = "#" * min(prog.count(" ") + 1, 4)
        out += [f"#{level} `{prog}`", ""]
        if p.description:
            out += ["```text", p.description.strip(), "```", ""]
        rows = [_option(a) for a in p._actions
                if a.help != argparse.SUPPRESS and not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]
        subs = [(c.dest, c.help) for a in p._actions if isinstance(a, argparse._SubParsersAction)
                for c in a._choices_actions]
        if subs:
            out += ["| command | what it does |", "|---|---|"]
            out += [f"| [`{prog} {name}`](#{(prog + ' ' + name).replace(' ', '-')}) | {_cell(h or '')} |"
                    for name, h in subs]
            out.append("")
        if rows:
            out += ["| argument | value | what it does |", "|---|---|---|"]
            out += [f"| {n} | {v} | {h} |" for n, v, h in rows]
            out.append("")
    return "\n".join(out)


def on_files(files: Any, config: Any) -> Any:
    """Add the generated page to the site's files (mkdocs calls this before reading the pages)."""
    from mkdocs.structure.files import File

    from vitkit.cli import build_parser

    files.append(File.generated(config, PAGE, content=markdown(build_parser())))
    return files
