"""The relay log (:mod:`.sink`: every event stored locally before the sink gets it;
:mod:`.recovery`: a start without the meta service applies it) and the replay of binlog files
into a sink that both it and ``binlog-bridge replay`` use (:mod:`.replay`)."""
