"""ascend-serve: provision Kunpeng + Ascend NPU fleets and serve DeepSeek models with vLLM."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ascend-serve")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
