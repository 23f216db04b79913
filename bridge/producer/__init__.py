"""Producers: the transactional writer over an upstream database (MySQL/MariaDB or SQLite)."""
