"""Ascend node simulator for tests.

Makes a container look like a Kunpeng + Ascend NPU server through the vendor's own interfaces:
a PCI tree in sysfs, vendor ``.run`` installers, and the ``npu-smi``, ``upgrade-tool`` and
``hccn_tool`` programs those installers put on the node. The roles under test never know it
exists; they only see what a real node shows.

Host side (this package): node descriptions (:mod:`.models`), the sysfs tree (:mod:`.sysfs`),
the installer builder (:mod:`.runfile`) and a CLI (``python -m ascend_sim``). Node side
(:mod:`.devtools`): standard-library-only code that the generated installers carry onto the node.
"""
