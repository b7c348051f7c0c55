"""``speculens`` and ``python -m speculens``: start the desktop application.

Heavy modules (Qt, pyqtgraph, llama.cpp) are imported only once we know a window is wanted, so
``--help``, ``--version`` and ``--self-test`` answer fast and the window appears quickly.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from speculens import __version__


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="speculens", description="See and speed up speculative decoding on local GGUF models."
    )
    parser.add_argument("--version", action="version", version=f"speculens {__version__}")
    parser.add_argument(
        "--self-test",
        action="store_true",
        help="check that the engine and Qt work in this installation, print the result and exit",
    )
    parser.add_argument("--debug", action="store_true", help="log at debug level")
    return parser


def _setup_logging(debug: bool) -> None:
    level = logging.DEBUG if debug else logging.INFO
    try:
        from speculens.logging_setup import setup_logging
    except ImportError:  # a build without the packaging module: log to stderr only
        logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
        return
    setup_logging(level)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the application.

    Args:
        argv: the arguments (default: ``sys.argv[1:]``); unknown ones are passed on to Qt.

    Returns:
        The exit status.
    """
    args, qt_args = _parser().parse_known_args(sys.argv[1:] if argv is None else argv)
    # Logging first: a windowed build has no console, so the log is where a self-test's result lands.
    _setup_logging(args.debug)
    if args.self_test:
        try:
            from speculens.selftest import run_self_test
        except ImportError:
            print("this build has no self-test module (speculens.selftest)", file=sys.stderr)
            return 2
        return run_self_test(log=print)
    from speculens.errors import SpeculensError
    from speculens.ui.app import run

    try:
        return run([sys.argv[0] if sys.argv else "speculens", *qt_args])
    except SpeculensError as exc:  # Qt cannot start here (a broken binding, missing system libraries)
        logging.getLogger("speculens").error("%s", exc)
        print(f"speculens: {exc}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
