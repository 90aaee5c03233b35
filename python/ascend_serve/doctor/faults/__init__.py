"""Faults as the vendor names them: one classifier, its data, and its documentation.

:mod:`.classifier` (the classifier over the collection's ``data/faults/vendor_codes.json`` and
``rules.yml``; chip-code classes, their order and blocking:
``plugins/module_utils/fault_codes.py``),
:mod:`.vendor_import` (regenerates ``vendor_codes.json`` from Ascend/mind-cluster),
:mod:`.docs` (renders docs/fault-codes.md from the data), :mod:`.explain` (``ascend-serve doctor
explain``: any log or tool output to the faults it shows).
"""

from ascend_serve.doctor.faults.classifier import (
    PROJECT,
    Classifier,
    Fault,
    FaultClass,
    FaultDataError,
    FaultRule,
    Scan,
    classifier,
    load_knowledge_base,
    with_knowledge_base,
)

__all__ = ["PROJECT", "Classifier", "Fault", "FaultClass", "FaultDataError", "FaultRule", "Scan",
           "classifier", "load_knowledge_base", "with_knowledge_base"]
