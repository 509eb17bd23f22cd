"""`servelab tune`: engine settings searched by launching and measuring, with Optuna."""

from servelab.tune.results import STUDY_FILE, LayoutModel, ObjectiveSpec, StudyResult, TrialRow

__all__ = ["STUDY_FILE", "LayoutModel", "ObjectiveSpec", "StudyResult", "TrialRow"]
