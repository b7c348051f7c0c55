"""The Qt-free speculative decoding engine.

Only :mod:`speculens.engine.backend` imports ``llama_cpp``; everything else works on our own small types.
"""
