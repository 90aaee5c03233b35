"""Report what a Python environment holds, for the python_env role (runs on the env's interpreter).

Usage: verify_env.py --import MODULE ... --dist DISTRIBUTION ...
Prints one JSON object: the interpreter version, purelib, each distribution's installed version
(null when absent) and each import's result ("ok" or the exception). Exit 0 even on failures:
the role compares the report with the set and names what differs.
"""

import argparse
import importlib
import importlib.metadata
import json
import sys
import sysconfig


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--import", dest="imports", action="append", default=[])
    parser.add_argument("--dist", dest="dists", action="append", default=[])
    args = parser.parse_args()
    dists = {}
    for name in args.dists:
        try:
            dists[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            dists[name] = None
    imports = {}
    for module in args.imports:
        try:
            importlib.import_module(module)
            imports[module] = "ok"
        except Exception as exc:  # report every failure, not just ImportError
            imports[module] = f"{type(exc).__name__}: {exc}"
    report = {
        "python": ".".join(str(part) for part in sys.version_info[:3]),
        "purelib": sysconfig.get_paths()["purelib"],
        "dists": dists,
        "imports": imports,
    }
    sys.stdout.write(json.dumps(report) + "\n")


if __name__ == "__main__":
    main()
