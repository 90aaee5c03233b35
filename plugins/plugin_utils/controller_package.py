"""What the collection's filter plugins share: reaching the ``ascend_serve`` package.

Filters run on the controller, where ``ascend_serve`` is installed next to Ansible; the logic
(version matrix, device IP plan, serving profiles, ...) lives there once, so roles and the CLI
cannot disagree. Each filter imports the package's modules it uses with plain imports, inside the
filter (:func:`needs_package`); when that import fails, it raises the error
:func:`require_package` words, naming the fix.
Filters hand the package plain data: Ansible passes lazily templated containers.

Controller-only code (``plugin_utils``, never shipped to a managed node as ``module_utils``
are): it may use Ansible's controller API and needs the ``ascend_serve`` package.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ansible.errors import AnsibleFilterError


def plain(value: Any) -> Any:
    """Plain dicts, lists and strings instead of Ansible's templated or tagged containers."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    return value


def require_package(missing: ImportError | None, filter_name: str) -> None:
    """A filter error that says how to install ``ascend_serve`` when the filter plugin's import
    of it failed (``missing``); nothing when it succeeded."""
    if missing is not None:
        raise AnsibleFilterError(
            f"{filter_name} needs the ascend_serve package on the controller "
            f"(pip install -e . in the project): {missing}"
        ) from missing


@contextmanager
def needs_package(filter_name: str) -> Iterator[None]:
    """Around a filter's import of the ``ascend_serve`` modules it uses: the error
    :func:`require_package` words when the import fails.

    Filters import the package inside the filter, not at the top of their plugin file: Ansible
    imports every filter plugin file of the collection in each forked worker that looks up one
    of its filters, so a top-level import of ``ascend_serve`` (pydantic, PyYAML, ...) cost every
    task that used any of the collection's filters about 0.3 CPU-s per host (docs/bench.md,
    "What a filter costs").
    """
    try:
        yield
    except ImportError as exc:
        require_package(exc, filter_name)
        raise


def filters_by_name(*functions: Callable[..., Any]) -> dict[str, Callable[..., Any]]:
    """A ``FilterModule.filters()`` answer: each filter under its function's name."""
    return {function.__name__: function for function in functions}
