"""Syncing: merged transactions become sink events (:mod:`.builder`, with the table filter of
:mod:`.filter`), which the syncer (:mod:`.syncer`) hands to the sink through the sink driver and
follows with the checkpoint."""
