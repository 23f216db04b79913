"""A spill directory that cannot take a chunked transaction's parts: a clear, retriable
SpillFailed naming spill-dir, transaction, bytes gathered and OS error; the partial spill file
is dropped; the puller records it, counts it as where="spill", and pulls the transaction again
whole once the disk has room, nothing partial reaching the merge.

The disk is made to fail for real where the kernel allows it without privileges (a spill-dir
that is no directory, RLIMIT_FSIZE in a child process); a full disk (ENOSPC) is simulated by
replacing ``os.pwrite`` for the spill directory's files only: it stands for the kernel, not for
a service. The pump is real (its storage on files, its gRPC service in-process)."""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client import REGISTRY

from bridge.binlog import Binlog, commit
from bridge.chunks import ChunkAssembler, SpillFailed
from bridge.proto import binlog_pb2
from drainer.collect.merger import MergeFeed, Merger, PulledTxn
from drainer.collect.pull import PumpPuller
from pump.service import PumpService, add_to_server
from pump.storage import Storage, StorageConfig
from tests.support.chunk_writer import final_binlog, part_binlog, part_is_intact
from tests.unit.test_chunks import COMMIT, START, final, part

ROOT = Path(__file__).resolve().parents[2]
HANG_GUARD = 120.0  # seconds; a safety net against hangs, never a performance assertion
PART_SIZE = 20_000


class SpillDisk:
    """``os.pwrite`` as a disk holding ``free`` bytes for the files in ``spill_dir`` (ENOSPC
    past them); every other file is written as usual."""

    def __init__(self, spill_dir: Path, free: int) -> None:
        self.spill_dir = str(spill_dir)
        self.free = free
        self.refused = 0
        self._pwrite: Callable[[int, Any, int], int] = os.pwrite

    def pwrite(self, fd: int, data: Any, offset: int) -> int:
        in_spill_dir = os.readlink(f"/proc/self/fd/{fd}").startswith(self.spill_dir + "/")
        if in_spill_dir and offset + len(data) > self.free:
            self.refused += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self._pwrite(fd, data, offset)


@pytest.fixture
def spill(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, SpillDisk]]:
    directory = tmp_path / "spill"
    directory.mkdir()
    disk = SpillDisk(directory, free=1 << 62)
    monkeypatch.setattr(os, "pwrite", disk.pwrite)  # process-wide; only spill files see a full disk
    yield directory, disk


def spill_files(directory: Path) -> list[str]:
    """This process's open files in ``directory`` (the spill files are unlinked: no listdir)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(f"{directory}/"):
            found.append(target)
    return found


def test_a_full_disk_is_a_spill_failed_naming_everything_and_the_parts_are_dropped(
    spill: tuple[Path, SpillDisk],
) -> None:
    directory, disk = spill
    assembler = ChunkAssembler("pump p1", directory)
    assembler.add(part(1, size=1000))
    assembler.add(part(2, size=1000))
    gathered = assembler._parts.size if assembler._parts is not None else 0
    assert gathered > 2000 and len(spill_files(directory)) == 1
    disk.free = gathered + 10  # part 3 does not fit
    with pytest.raises(SpillFailed) as raised:
        assembler.add(part(3, size=1000))
    failure = raised.value
    message = str(failure)
    assert message.startswith(f"pump p1: spill-dir {directory}: ")
    assert f"start_ts {START}, commit_ts {COMMIT}" in message
    assert f"after {gathered} bytes gathered" in message
    assert "No space left on device" in message and "[Errno 28]" in message
    assert (failure.start_ts, failure.commit_ts, failure.gathered) == (START, COMMIT, gathered)
    assert failure.errno == errno.ENOSPC and failure.retriable
    assert isinstance(failure.__cause__, OSError)
    assert assembler.pending == 0 and spill_files(directory) == []  # the partial file is gone
    # Room again: the source sends the transaction from part 1 and it is gathered whole.
    disk.free = 1 << 62
    for chunk in (1, 2, 3):
        assembler.add(part(chunk, size=1000))
    parts = assembler.finish(final(3))
    assert parts is not None and parts.count == 3
    assert list(parts.binlogs()) == [part(c, size=1000) for c in (1, 2, 3)]
    parts.close()


def test_a_spill_dir_that_is_no_directory_fails_at_the_first_part(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "spill"
    not_a_dir.write_text("a file where the spill directory should be")
    assembler = ChunkAssembler("pump p1", not_a_dir)
    with pytest.raises(SpillFailed, match=rf"pump p1: spill-dir {not_a_dir}: .*after 0 bytes gathered"):
        assembler.add(part(1))
    assert assembler.pending == 0


def test_a_file_size_limit_fails_a_real_write_in_a_child(tmp_path: Path) -> None:
    """RLIMIT_FSIZE makes the kernel refuse the write past the limit (EFBIG): no patching."""
    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    script = textwrap.dedent(
        f"""
        import resource, signal
        from pathlib import Path
        from bridge.chunks import ChunkAssembler, SpillFailed
        from tests.unit.test_chunks import part

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failing write, not a killed process
        resource.setrlimit(resource.RLIMIT_FSIZE, (50_000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        assembler = ChunkAssembler("pump p1", Path({str(spill_dir)!r}))
        try:
            for chunk in range(1, 10):
                assembler.add(part(chunk, size=20_000))
        except SpillFailed as exc:
            print("FAILED", exc.errno, exc.gathered, assembler.pending)
            print(exc)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=HANG_GUARD,
    )
    first, message = done.stdout.splitlines()
    verdict, code, gathered, pending = first.split()
    assert (verdict, int(code), int(pending)) == ("FAILED", errno.EFBIG, 0)
    assert 40_000 <= int(gathered) <= 50_000  # two parts fitted, the third did not
    assert f"spill-dir {spill_dir}" in message and "File too large" in message
    assert f"start_ts {START}, commit_ts {COMMIT}" in message


# ------------------------------------------------------------------------ the puller


class PullOnly:
    """The service's write admission, for a pump this test only pulls from (the binlogs go
    straight into its storage): every write is refused."""

    def write_refusal(self, prewrite: bool) -> str:
        return "this test pump takes no writes"

    def enter_writes(self, prewrites: int, others: int) -> None:
        raise AssertionError("no write is admitted")

    def exit_writes(self, prewrites: int, others: int) -> None:
        raise AssertionError("no write is admitted")


def pairs(binlogs: list[Binlog]) -> list[tuple[Binlog, bytes]]:
    return [(b, b.SerializeToString()) for b in binlogs]


def spill_errors() -> float:
    return REGISTRY.get_sample_value("bridge_drainer_errors_total", {"where": "spill"}) or 0.0


async def until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.02)


def test_the_puller_retries_a_full_spill_disk_and_delivers_the_transaction_whole(
    tmp_path: Path, spill: tuple[Path, SpillDisk]
) -> None:
    directory, disk = spill
    small_start, small_commit, big_start, big_commit = 1000, 1001, 1010, 1020

    async def scenario() -> None:
        storage = await Storage.open(tmp_path / "pump", StorageConfig(segment_size=1 << 20))
        small = final_binlog(small_start, 0)
        await storage.write(pairs([small, commit(small_start, small_commit)]))
        await storage.write(pairs([part_binlog(big_start, c, PART_SIZE) for c in (1, 2, 3)]))
        await storage.write(pairs([final_binlog(big_start, 3), commit(big_start, big_commit)]))
        await storage.wait_indexed()
        server = grpc.aio.server()
        service = PumpService(7, PullOnly(), storage, max_message_bytes=4 << 20)
        add_to_server(service, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        feed = MergeFeed(Merger())
        feed.add_source("p1", after_ts=0)
        puller = PumpPuller("p1", f"127.0.0.1:{port}", 7, feed, spill_dir=directory)
        disk.free = PART_SIZE + PART_SIZE // 2  # part 1 fits, part 2 does not
        errors_before = spill_errors()
        task = asyncio.create_task(puller.run())
        try:
            await until(lambda: spill_errors() >= errors_before + 2)  # failed, retried, failed again
            error = puller.status.last_error
            assert error.startswith(f"pump p1: spill-dir {directory}: ")
            assert f"start_ts {big_start}, commit_ts {big_commit}" in error
            assert "No space left on device" in error and "bytes gathered" in error
            assert puller.status.pending_parts == 0
            assert not task.done()  # the drainer goes on
            # Nothing of the transaction reached the merge (the small one before it may have,
            # when it came in a message of its own).
            merged: list[PulledTxn] = feed.merger.pop_ready().txns
            assert all(txn.commit_ts != big_commit for txn in merged)

            disk.free = 1 << 62  # the operator freed the disk

            def collect() -> bool:
                merged.extend(feed.merger.pop_ready().txns)
                return any(txn.commit_ts == big_commit for txn in merged)

            await until(collect)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            service.end_pulls()
            await server.stop(None)
            await storage.close()
        assert [txn.commit_ts for txn in merged] == [small_commit, big_commit]
        parts = merged[1].parts
        assert parts is not None and parts.count == 3
        pulled = [binlog_pb2.Binlog.FromString(b) for b in parts.binlogs()]
        assert [p.chunk for p in pulled] == [1, 2, 3] and all(part_is_intact(p) for p in pulled)
        parts.close()

    asyncio.run(asyncio.wait_for(scenario(), HANG_GUARD))
