"""servelab: the performance lab for LLM serving deployments."""

__version__ = "0.1.0"
