"""What a job's checks (`JobSpec.check`) share: a path the config names exists on this machine.

The workloads' own checks live with their configs (evolution/checks.py, scaling/checks.py,
thinking/checks.py); a checkpoint or a seed corpus is checked by training/checks.py, an
engine by search/engines/checks.py, a `module:function` by common/plugins.py.
"""

from __future__ import annotations

from pathlib import Path

from common.config import ConfigError


def need_path(field: str, path: str, what: str) -> None:
    """`path` exists (relative paths from the working directory, as the job reads them)."""
    if not Path(path).expanduser().exists():
        raise ConfigError(f"{field}={path!r}: no such {what} (from {Path.cwd()}); give an existing path")
