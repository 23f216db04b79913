"""``binlog-bridge demo`` and the cluster launcher the end-to-end tests share.

| module | role |
|---|---|
| :mod:`bridge.demo.cluster` | ``Cluster``: meta, pumps and a drainer as child processes, their configs |
| :mod:`bridge.demo.workload` | ``LoadProcess``: ``binlog-bridge load`` as a child, its progress and summary |
| :mod:`bridge.demo.process` | ``ServiceProcess``: one child, its log file, ready line, stop and kill |
| :mod:`bridge.demo.runner` | ``run_demo``: cluster, load, catch-up, diff, summary |
| :mod:`bridge.demo.progress` | the live progress line and the lag samples |
| :mod:`bridge.demo.summary` | ``DemoSummary``: what is printed and saved as ``summary.json`` |
| :mod:`bridge.demo.signals` | SIGINT/SIGTERM/SIGHUP as ``Interrupted``; held off during cleanup |
| :mod:`bridge.demo.tomlfile` | writes the children's TOML configs |
"""

from bridge.demo.cluster import Cluster, ClusterSpec
from bridge.demo.errors import CatchUpTimeout, DataDirInUse, DemoError, Interrupted, ServiceFailed
from bridge.demo.process import ServiceProcess
from bridge.demo.runner import DemoOptions, run_demo
from bridge.demo.summary import DemoSummary
from bridge.demo.workload import LoadProcess, LoadProgress

__all__ = [
    "CatchUpTimeout",
    "Cluster",
    "ClusterSpec",
    "DataDirInUse",
    "DemoError",
    "DemoOptions",
    "DemoSummary",
    "Interrupted",
    "LoadProcess",
    "LoadProgress",
    "ServiceFailed",
    "ServiceProcess",
    "run_demo",
]
