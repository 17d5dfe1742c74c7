"""The orchestrator: CLI, scene specs, simulation adapter, pipeline, reports."""
