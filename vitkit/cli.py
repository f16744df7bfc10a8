"""The `vitkit` command line. Every module in `vitkit/commands/` that defines `add_arguments(parser)`
and `run(args) -> int` (and a one-line `HELP`) is a subcommand named after the module."""

from __future__ import annotations

import argparse
import errno
import functools
import importlib
import os
import pkgutil
import re
import signal
import sys
import threading
import traceback
import warnings
from typing import NoReturn

import vitkit
import vitkit.commands


class _Parser(argparse.ArgumentParser):
    """argparse with a mistake on one line, as every other user mistake (`vitkit CMD: error: ...`, exit 2),
    instead of the usage block before it; the hint points to the command's --help."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: one subparser per command module, a new parser on every call (`main` parses with
    one built once per process, `_parser`)."""
    parser = _Parser(prog="vitkit", description="Vision Transformer toolkit (Dosovitskiy et al., 2021)")
    parser.add_argument("--version", action="version", version=f"vitkit {vitkit.__version__}")
    parser.add_argument("--debug", action="store_true",
                        help=f"show the Python traceback of an error (also: {DEBUG_ENV}=1)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(vitkit.commands.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"vitkit.commands.{info.name}")
        if not (hasattr(mod, "add_arguments") and hasattr(mod, "run")):
            continue
        p = sub.add_parser(info.name.replace("_", "-"), help=getattr(mod, "HELP", None), description=mod.__doc__)
        mod.add_arguments(p)
        p.set_defaults(_command=mod, _parser=p)  # the module, not its run: run is looked up when the command runs
    return parser


@functools.cache
def _parser() -> argparse.ArgumentParser:
    """`build_parser()`, built once per process (every command's options and help texts): parsing reads a parser and
    never changes it (each parse gets its own namespace; `--set`'s list default is copied before it is appended to)."""
    return build_parser()


DEBUG_ENV = "VITKIT_DEBUG"


def _user_message(e: BaseException) -> tuple[str, int]:
    """A one-line message for an exception that reached the command line, and the exit code.

    Mistakes in what the user gave (paths, values, files, configs) exit 2; anything else exits 1 and is
    marked as vitkit's own failure, to be reported with the traceback of --debug."""
    text = str(e)
    if "Original Traceback (most recent call last)" in text:  # torch's wrapper of a loader worker's error
        head = text.split("\n", 1)[0].strip()
        last = [ln.strip() for ln in text.splitlines() if ln.strip()][-1]
        where = " ".join(head.split())
        text = f"{last} ({where.rstrip('.').lower()})" if where else last
    msg = " ".join(text.split()) or type(e).__name__
    sig = re.search(r"killed by signal: (\w+)", msg)
    if isinstance(e, RuntimeError) and sig:  # a worker process stopped from outside (SIGTERM / SIGKILL to the group)
        code = {"Terminated": 143, "Killed": 137}.get(sig.group(1), 1)
        return (f"stopped by a signal ({sig.group(1)}): a worker process was killed from outside vitkit (a SIGTERM or "
                f"SIGKILL to the job, or the system's out-of-memory killer), not a failure of the run ({msg})"), code
    if isinstance(e, (ValueError, FileNotFoundError, FileExistsError, FloatingPointError, ZeroDivisionError)):
        return msg, 2
    if isinstance(e, (IsADirectoryError, NotADirectoryError, PermissionError)):
        what = {IsADirectoryError: "is a folder, a file was expected", NotADirectoryError: "is not a folder",
                PermissionError: "permission denied"}[type(e)]
        where = e.filename or msg
        return f"{where}: {what} ({e.strerror or msg})", 2
    if isinstance(e, OSError):
        where = f"{e.filename}: " if e.filename else ""
        full = e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) and "disk full" not in (e.strerror or msg)
        hint = "; is the disk full?" if full else ""
        return f"{where}{e.strerror or msg}{hint}", 2
    if isinstance(e, KeyError):
        return f"missing key {msg}", 1
    return f"{type(e).__name__}: {msg}", 1


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is running so that it unwinds as Ctrl-C does: files written atomically,
    worker processes stopped (`vitkit reproduce --jobs`), exit code 143."""


def _raise_terminated(signum: int, frame: object) -> NoReturn:
    raise Terminated()


def _sigterm(handler: object) -> object:
    """Install `handler` for SIGTERM and return the one it replaces (nothing where signals can't be set: outside
    the main thread)."""
    if handler is None or threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, handler)


def main(argv: list[str] | None = None) -> int:
    """Run one command. A user's mistake never shows a traceback: one line on stderr names what is
    wrong and the exit code is non-zero; `--debug` (or VITKIT_DEBUG=1) prints the traceback before that line, with
    the same exit code."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # named by the command's parser, so that its hint is the command's --help
        getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if getattr(args, "_command", None) is None:
        parser.print_help()
        return 2
    debug = args.debug or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    shown = warnings.formatwarning
    if not debug:  # a warning is one line in vitkit's words, not Python's file:line: UserWarning: block
        warnings.formatwarning = lambda message, *_a, **_k: f"vitkit {args.command}: warning: {message}\n"
    on_term = _sigterm(_raise_terminated)
    try:
        return int(args._command.run(args) or 0)
    except KeyboardInterrupt as e:
        term = isinstance(e, Terminated)
        print(f"vitkit {args.command}: {'terminated' if term else 'interrupted'}", file=sys.stderr)
        return 143 if term else 130
    except Exception as e:  # noqa: BLE001 - the one error boundary of the command line
        msg, code = _user_message(e)
        if debug:  # the traceback first, then the same line and the same exit code as without --debug
            traceback.print_exc()
        tail = "" if code != 1 or debug else (f" (vitkit's own failure: rerun with --debug or {DEBUG_ENV}=1 for "
                                              "the traceback)")
        print(f"vitkit {args.command}: error: {msg}{tail}", file=sys.stderr)
        return code
    finally:
        warnings.formatwarning = shown
        _sigterm(on_term)


if __name__ == "__main__":
    sys.exit(main())
