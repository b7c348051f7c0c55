"""The model manager is Qt-free and reaches llama.cpp only through the engine's backend."""

from __future__ import annotations

import subprocess
import sys


def test_models_import_neither_qt_nor_llama_cpp() -> None:
    code = (
        "import sys\n"
        "import speculens.models.gguf_info, speculens.models.compat, speculens.models.library\n"
        "import speculens.models.hub, speculens.models.catalog, speculens.models.resolve\n"
        "import speculens.cli.models_cmd\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'PySide6', 'pyqtgraph', 'llama_cpp'})\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""
