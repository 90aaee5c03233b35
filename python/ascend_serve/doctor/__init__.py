"""Diagnosing hosts: collect over SSH or locally, match known problems, redact, report."""
