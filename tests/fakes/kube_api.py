"""The Kubernetes API emulator, for tests: it ships in `shell/kube_emulator.py` because
`taubot shell --demo` serves the demo cluster with it. Tests import it from here."""

from shell.kube_emulator import *  # noqa: F403
from shell.kube_emulator import KubeEmulator, running_emulator  # noqa: F401
