"""The applications built on the kernel, one sub-package each.

``consume`` (read the change topics), ``demo`` (the whole system on embedded
defaults), ``diff`` (compare a downstream with its upstream), ``load`` (the
workload generator) and ``meta`` (the meta server: TSO, node registry, store
backends). They import the kernel (``bridge.*`` outside ``apps``) and each
other's public modules, never ``pump`` or ``drainer``: sinks reach them through
the registry in ``bridge.sink``.
"""
