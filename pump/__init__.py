"""The pump: stores every transaction's binlogs durably and serves the committed
ones to drainers in commit_ts order. ``pump.storage`` is its storage engine."""
