"""The desktop application (PySide6, pyqtgraph): the only package that imports Qt."""

from __future__ import annotations
