"""The MLflow tracking server of the tests: the one the demo serves (`shell/mlflow_emulator.py`)."""

from shell.mlflow_emulator import MlflowEmulator as FakeMlflow
from shell.mlflow_emulator import running_mlflow as running_fake_mlflow

__all__ = ["FakeMlflow", "running_fake_mlflow"]
