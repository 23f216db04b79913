"""``binlog-bridge demo`` and the cluster launcher the end-to-end tests share.

| module | role |
|---|---|
| :mod:`bridge.apps.demo.cluster` | ``Cluster``: meta, pumps and a drainer as child processes, their configs |
| :mod:`bridge.apps.demo.workload` | ``LoadProcess``: ``binlog-bridge load`` as a child, progress, summary |
| :mod:`bridge.apps.demo.process` | ``ServiceProcess``: one child, its log file, ready line, stop and kill |
| :mod:`bridge.apps.demo.runner` | ``run_demo``: cluster, load, catch-up, diff, summary |
| :mod:`bridge.apps.demo.progress` | the live progress line and the lag samples |
| :mod:`bridge.apps.demo.summary` | ``DemoSummary``: what is printed and saved as ``summary.json`` |
| :mod:`bridge.apps.demo.signals` | SIGINT/SIGTERM/SIGHUP as ``Interrupted``; held off during cleanup |
| :mod:`bridge.apps.demo.tomlfile` | writes the children's TOML configs |
"""

from bridge.apps.demo.cluster import Cluster, ClusterSpec
from bridge.apps.demo.errors import CatchUpTimeout, DataDirInUse, DemoError, Interrupted, ServiceFailed
from bridge.apps.demo.process import ServiceProcess
from bridge.apps.demo.runner import DemoOptions, run_demo
from bridge.apps.demo.summary import DemoSummary
from bridge.apps.demo.workload import LoadProcess, LoadProgress

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
