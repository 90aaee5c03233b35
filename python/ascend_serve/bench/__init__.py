"""Load generation, metrics, SLO sweeps, NPU telemetry and tuning of a running vLLM server."""
