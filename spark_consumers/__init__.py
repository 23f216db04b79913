"""PySpark jobs over the binlog bridge's Kafka change topics: search indexes and snapshots."""
