"""Training-side parallelism: gradient all-reduce variants (data parallel wrappers), optimizer-state
sharding, and the launcher that runs a function on several ranks (parallel/launch.py)."""
