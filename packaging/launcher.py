"""Entry script of the frozen application (PyInstaller runs a script, not a package entry point).

It does exactly what the installed ``speculens`` gui-script does: call :func:`speculens.__main__.main`.
``speculens --self-test`` is handled there.
"""

from __future__ import annotations

import multiprocessing
import sys

if __name__ == "__main__":
    # A frozen child process (if any library starts one) must run its task, not a second copy of the app.
    multiprocessing.freeze_support()
    from speculens.__main__ import main

    sys.exit(main())
