"""Code that runs on managed nodes: standard library only, Python 3.8+.

Some modules are the Ansible collection's ``module_utils`` (symbolic links); the others are
scripts the roles and ``doctor`` copy to a node and run there with its system Python.
"""
