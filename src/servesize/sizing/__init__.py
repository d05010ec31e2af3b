"""Many deployments at once: the fleet search over GPU types, shapes and replica counts (search.py, its result in
result.py), several teams sharing one pool (teams.py), GPU-hour prices (prices.py) and the fill pass that counts
warm sessions for many pools and mixes in one pass (fill_pass.py). One deployment's ceilings are planning/'s."""
