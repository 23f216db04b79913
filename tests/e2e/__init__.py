"""End-to-end tests: the whole pipeline as real processes (meta, pumps, drainer, load), ending in a diff."""
