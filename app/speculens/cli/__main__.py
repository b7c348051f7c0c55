"""``speculens-cli``: the headless command line over the engine and the model manager.

Each sub-command lives in its own module with a ``register(subparsers)`` function that adds its parser
and sets ``func`` to the function that runs it (returning the exit status).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from speculens import __version__
from speculens.cli import bench_cmd, generate_cmd, lab_cmd, models_cmd, ngram_cmd, replay_cmd

COMMANDS = (generate_cmd, bench_cmd, replay_cmd, lab_cmd, ngram_cmd, models_cmd)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser."""
    parser = argparse.ArgumentParser(
        prog="speculens-cli",
        description="Speculative decoding on local GGUF models: generate, benchmark, manage models.",
    )
    parser.add_argument("--version", action="version", version=f"speculens {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log llama.cpp's messages to stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.register(sub)
    parser.set_defaults(command_parsers=sub.choices)  # for main's errors in a command's own words
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 1 failure, 2 bad usage)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # with the command's usage, not the top level's (a tour's `generate --bogus` got the latter)
        args.command_parsers[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not args.verbose:
        logging.getLogger("speculens.llama_cpp").setLevel(logging.ERROR)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of stdout went away (`generate … | head -2`): stop quietly, as a Unix tool killed by SIGPIPE
        # does (status 141), instead of a traceback (a tour's); stdout goes to devnull so the final flush is quiet.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, AttributeError, ValueError):  # no stdout file to point elsewhere
            pass
        return 141


if __name__ == "__main__":
    sys.exit(main())
