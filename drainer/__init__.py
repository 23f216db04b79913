"""The drainer: merges the pumps' streams by commit_ts and drives a sink."""
