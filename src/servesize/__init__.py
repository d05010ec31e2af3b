"""servesize: how many users can these GPUs serve, comfortably, and which knob buys more?

The engine is a one-way pipeline of small pure functions over frozen dataclasses
(see DESIGN in the README): Architecture + Gpu + Deployment -> MemoryBudget -> KvPool
-> WarmCapacity / Decode / Prefill -> Plan. Only the loaders, ``measure``, ``web`` and
``cli`` touch files, network or the terminal.
"""

__version__ = "0.1.0"
