"""Serving: DeepSeek profiles, model fit, the vLLM launcher, model manifests, a local server."""
