"""Exit codes of every ``ascend-serve`` command, for the domain code that decides them.

0 success, 1 a check failed (the thing checked is not right), 2 bad usage or unreadable input
(nothing was checked), 3 the operation itself failed (a server that died while starting, a
timeout), 130 interrupted by the operator (128 + SIGINT, as shells report it).
"""

from __future__ import annotations

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT, EXIT_FAILED = 0, 1, 2, 3
EXIT_CANCELED = 130
