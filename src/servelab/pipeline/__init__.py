"""`servelab run`: the main job in one command."""

from servelab.pipeline.run import RunConfig, RunResult, run_pipeline

__all__ = ["RunConfig", "RunResult", "run_pipeline"]
