"""Experiment tracking: a job's per-iteration numbers to the trackers its training reports to.

    tracking:                        # in a job's YAML (TrackingConfig)
      report_to: [tensorboard]       # TRL's report_to names: tensorboard, mlflow, wandb
      dir: ""                        # offline trackers' files; "" = runs/<experiment>/tracking

    tracker = Tracker.start(cfg.tracking, run_dir=ctx.run_dir, experiment=cfg.experiment, config=cfg)
    tracker.log({"solved": 3.0, "hit_rate": 0.01}, step=iteration, prefix="search")
    tracker.close()

The same `report_to` goes to TRL's trainers (training_args(): TensorBoard event files under
`<dir>/train-<name>`, MLflow and W&B runs of their own), so a run's search and judge
metrics and its training losses land in one tracker. TensorBoard writes event files here
(offline); MLflow follows $MLFLOW_TRACKING_URI (a local `file:` store or a server); W&B
needs `wandb login` (or WANDB_MODE=offline). Nothing is tracked unless asked.
"""

from __future__ import annotations

import dataclasses
import logging
import numbers
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from common.config import to_dict
from common.redaction import redact_secrets

log = logging.getLogger(__name__)

Backend = Literal["tensorboard", "mlflow", "wandb"]
INSTALL = {"tensorboard": "pip install tensorboard", "mlflow": "pip install mlflow", "wandb": "pip install wandb"}


@dataclass
class TrackingConfig:
    report_to: list[Backend] = field(default_factory=list)  # trackers for training and search metrics; [] = none
    dir: str = ""  # where TensorBoard writes; "" = <runs_dir>/<experiment>/tracking


def tracking_dir(cfg: TrackingConfig, run_dir: Path) -> Path:
    return Path(cfg.dir) / run_dir.name if cfg.dir else run_dir / "tracking"


def training_args(cfg: TrackingConfig, run_dir: Path, name: str) -> dict[str, Any]:
    """Fields for a TRL config (RatchetTrainFields): report_to, and where TensorBoard writes."""
    if not cfg.report_to:
        return {"report_to": "none"}
    return {"report_to": list(cfg.report_to), "run_name": name,
            "tracking_dir": str((tracking_dir(cfg, run_dir) / f"train-{name}").resolve())}


def flat_numbers(data: Any, prefix: str = "") -> dict[str, float]:
    """Numeric leaves of nested dicts as `a/b` keys (bools, strings and lists left out)."""
    out: dict[str, float] = {}
    if isinstance(data, dict):
        for k, v in data.items():
            out |= flat_numbers(v, f"{prefix}{k}/")
    elif isinstance(data, numbers.Real) and not isinstance(data, bool):
        out[prefix.rstrip("/")] = float(data)
    return out


class Tracker:
    """Scalars to every backend in report_to; a no-op with none."""

    def __init__(self, backends: dict[str, Any]):
        self.backends = backends

    @classmethod
    def start(cls, cfg: TrackingConfig, *, run_dir: Path, experiment: str, config: Any = None) -> Tracker:
        backends: dict[str, Any] = {}
        params = redact_secrets(to_dict(config) if dataclasses.is_dataclass(config) else config or {})
        for name in cfg.report_to:
            try:
                backends[name] = _OPEN[name](tracking_dir(cfg, run_dir) / "search", experiment, params)
            except ImportError as e:
                raise RuntimeError(f"tracking.report_to has {name!r} but {name} is not installed ({e}); "
                                   f"{INSTALL[name]}, or remove it from tracking.report_to") from None
        if backends:
            log.info("tracking to %s (%s)", ", ".join(backends), tracking_dir(cfg, run_dir))
        return cls(backends)

    def log(self, metrics: dict[str, Any], step: int, prefix: str = "") -> dict[str, float]:
        """Send the numeric leaves of `metrics` as `prefix/key` at `step`; returns what was sent."""
        values = flat_numbers(metrics, f"{prefix}/" if prefix else "")
        for name, backend in self.backends.items():
            if name == "tensorboard":
                for k, v in values.items():
                    backend.add_scalar(k, v, step)
                backend.flush()
            elif name == "mlflow":
                backend.log_metrics({k.replace("/", "."): v for k, v in values.items()}, step=step)
            elif name == "wandb":
                backend.log(values, step=step)
        return values

    def close(self) -> None:
        for name, backend in self.backends.items():
            if name == "tensorboard":
                backend.close()
            elif name == "mlflow":
                backend.end_run()
            else:
                backend.finish()
        self.backends = {}

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _tensorboard(path: Path, experiment: str, params: dict[str, Any]) -> Any:
    from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

    writer = SummaryWriter(log_dir=str(path))
    writer.add_text("config", f"```\n{params}\n```")
    return writer


def _mlflow(path: Path, experiment: str, params: dict[str, Any]) -> Any:
    import mlflow  # $MLFLOW_TRACKING_URI picks the store, as TRL's MLflowCallback does

    mlflow.set_experiment(experiment)
    mlflow.start_run(run_name=f"{experiment}-search")
    mlflow.log_params({k: str(v)[:250] for k, v in flat_params(params).items()})
    return mlflow


def _wandb(path: Path, experiment: str, params: dict[str, Any]) -> Any:
    import wandb

    return wandb.init(project=experiment, name=f"{experiment}-search", config=params, dir=str(path), reinit=True)


def flat_params(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for k, v in data.items():
            out |= flat_params(v, f"{prefix}{k}.")
        return out
    return {prefix.rstrip("."): data}


_OPEN = {"tensorboard": _tensorboard, "mlflow": _mlflow, "wandb": _wandb}
