"""Collecting: which pumps are merged (:mod:`.collector`), one pull stream per pump
(:mod:`.pull`), and the k-way merge in commit_ts order gated by the pumps' watermarks
(:mod:`.merger`)."""
