"""Data files shipped with Speculens: the model catalog, prompt suites, style sheets."""
