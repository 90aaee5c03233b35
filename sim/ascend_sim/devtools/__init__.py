"""Node-side code of the simulator: vendor tools and installer logic (standard library only).

This package travels inside the generated ``.run`` installers and runs on the simulated node with
the node's own ``python3``; keep it free of third-party imports and of syntax newer than 3.8.
"""
