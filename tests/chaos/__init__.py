"""Crash safety under faults: the real server, a scripted mixed load, SIGKILLs, and invariants.

``app`` is the agent, ``client`` a browser tab, ``server`` the server process, ``driver`` the
load, ``store`` a read-only snapshot of an instance file, ``invariants`` what must hold after
every restart, ``run`` the loop (``make chaos``; ``tests/e2e/test_chaos.py`` in the suite).
``cluster`` is the loop on nodes behind HAProxy (``make chaos CLUSTER=3``), ``fences`` the
cluster's own invariants, read in the shared database.
"""
