"""Code that runs on managed nodes: standard library only (``validate.py`` also httpx, which every
vLLM environment has), Python 3.8+ (``tests/unit/test_layout.py``).

Some modules are the Ansible collection's ``module_utils`` (symbolic links); the others are
scripts the roles and ``doctor`` copy to a node and run there with its system Python.
"""
