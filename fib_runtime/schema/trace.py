"""Trace and Evaluation: a workload, optionally with a solution and its measured result.

A workload-only trace (``solution`` and ``evaluation`` null) is how workloads are stored. An
evaluation trace carries one of seven statuses, with these rules (flashinfer-bench 0.1.2):
``PASSED`` requires ``correctness`` and ``performance``; ``INCORRECT_NUMERICAL`` requires
``correctness`` and forbids ``performance``; every other status forbids both.
"""

from __future__ import annotations

import enum
from typing import Any, Dict, Optional

from pydantic import Field, model_validator

from ._base import TraceModel
from .workload import Workload


class EvaluationStatus(str, enum.Enum):
    PASSED = "PASSED"
    INCORRECT_SHAPE = "INCORRECT_SHAPE"
    INCORRECT_NUMERICAL = "INCORRECT_NUMERICAL"
    INCORRECT_DTYPE = "INCORRECT_DTYPE"
    RUNTIME_ERROR = "RUNTIME_ERROR"
    COMPILE_ERROR = "COMPILE_ERROR"
    TIMEOUT = "TIMEOUT"


class Environment(TraceModel):
    hardware: str
    libs: Dict[str, str] = Field(default_factory=dict)


class Correctness(TraceModel):
    max_relative_error: float = 0.0
    max_absolute_error: float = 0.0
    extra: Optional[Dict[str, Any]] = None


class Performance(TraceModel):
    latency_ms: float = Field(default=0.0, ge=0)
    reference_latency_ms: float = Field(default=0.0, ge=0)
    speedup_factor: float = Field(default=0.0, ge=0)


class Evaluation(TraceModel):
    status: EvaluationStatus
    environment: Environment
    timestamp: str
    log: str = ""
    correctness: Optional[Correctness] = None
    performance: Optional[Performance] = None

    @model_validator(mode="after")
    def _status_rules(self):
        s = self.status
        if s == EvaluationStatus.PASSED:
            if self.correctness is None or self.performance is None:
                raise ValueError("status PASSED requires both 'correctness' and 'performance'")
        elif s == EvaluationStatus.INCORRECT_NUMERICAL:
            if self.correctness is None:
                raise ValueError("status INCORRECT_NUMERICAL requires 'correctness'")
            if self.performance is not None:
                raise ValueError("status INCORRECT_NUMERICAL must not have 'performance'")
        else:
            if self.correctness is not None or self.performance is not None:
                raise ValueError(f"status {s.value} must have neither 'correctness' nor 'performance'")
        return self


class Trace(TraceModel):
    definition: str = Field(min_length=1)
    workload: Workload
    solution: Optional[str] = None
    evaluation: Optional[Evaluation] = None

    @property
    def is_workload_trace(self) -> bool:
        return self.solution is None and self.evaluation is None

    @model_validator(mode="after")
    def _consistent(self):
        if self.evaluation is not None and self.solution is None:
            raise ValueError("solution: an evaluation trace must name its 'solution'")
        return self
