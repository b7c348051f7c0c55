"""The headless command line, ``speculens-cli``."""
