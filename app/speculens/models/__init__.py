"""Model files: GGUF facts, the local library, the demo models, target/draft pairing. No Qt here."""
