"""The accelerator stack: version sets (matrix), their locks, npu-smi, preflight reports."""
