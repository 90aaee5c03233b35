"""The air-gapped bundle: every artifact an inventory needs, fetched, verified, pointed at.

- :mod:`.inventory`: the inventory's hosts with their variables, resolved by Ansible's own
  inventory and variable machinery, and the roles' defaults templated as the roles template them.
- :mod:`.plan`: the artifact list derived from those variables (vendor installers, locked wheels,
  OS packages, model files, images).
- :mod:`.bundle`: fetching into a bundle directory, its manifest ``bundle.json``, verifying it.
- :mod:`.pointing`: the group_vars file that points an inventory at a bundle.
"""
