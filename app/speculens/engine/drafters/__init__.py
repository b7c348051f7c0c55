"""Draft sources: a second model, prompt lookup, an n-gram cache and a static n-gram map."""
