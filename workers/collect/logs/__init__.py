"""Layer 7's first evidence: a run's log, from the Ray dashboard, the pod, or Azure Data Explorer."""
