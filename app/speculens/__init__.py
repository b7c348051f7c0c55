"""Speculens: run and see speculative decoding on local GGUF models."""

from __future__ import annotations

__version__ = "0.1.0"
APP_NAME = "Speculens"
