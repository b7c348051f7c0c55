"""The application icons, as package data (``importlib.resources.files("speculens.icons")``).

``speculens.svg`` is the master; ``png/``, ``speculens.ico`` and ``speculens.icns`` are rendered from it by
``packaging/make_icons.py``. This file makes the folder a regular package: setuptools' editable installs
cannot map a namespace package under a regular one (``speculens``), so without it the icons would be
missing when running from a checkout.
"""
