"""The tantivy change index: documents, idempotent apply, search and stats."""
