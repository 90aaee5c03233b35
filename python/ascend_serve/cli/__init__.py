"""The ``ascend-serve`` command line: one thin module per command (``main`` assembles them).

Commands parse options, call the domain packages and print; no command imports another, and
no domain package imports this one (``tests/unit/test_layout.py``).
"""
