"""Live-server measurement: what a running engine really holds, decided by load, not arithmetic.

The package is an edge (it touches the network, files and the terminal); the core never imports it.

- ``client``     asyncio/aiohttp streaming client for OpenAI-compatible servers; every failure is a result
- ``record``     the JSONL run record: a header, then every outcome appended and flushed as it completes
- ``prompts``    prompts of exactly S tokens that share no cached block (unique id first, seeded filler)
- ``metrics``    Prometheus scrape of vLLM's prefix-cache counters, preemptions and cache_config_info
- ``pool``       ``measure pool``: the KV pool, by bisection on the LRU cliff
- ``sessions``   ``measure sessions``: simulated agentic users on a ladder of user counts
- ``report``     text tables for both results; ``plots`` their PNGs
"""
