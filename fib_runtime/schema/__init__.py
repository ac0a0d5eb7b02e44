"""The FlashInfer Trace data model (pydantic v2), lossless in both directions.

Read with ``Model.model_validate(obj)`` (or :func:`parse` with a dialect), write with
``obj.to_dict()`` / ``obj.to_json(indent=2)``. Unknown keys are kept and written back, key order
is preserved, and fields absent on read stay absent on write.
"""

from ._base import DIALECTS, TraceModel
from .definition import DTYPES, FLASHINFER_EXTRA_DTYPES, AxisConst, AxisVar, Definition, TensorSpec
from .solution import LANGUAGES, BuildSpec, Solution, SourceFile
from .trace import Correctness, Environment, Evaluation, EvaluationStatus, Performance, Trace
from .workload import RandomInput, SafetensorsInput, ScalarInput, Workload

__all__ = [
    "DIALECTS", "TraceModel", "DTYPES", "FLASHINFER_EXTRA_DTYPES", "AxisConst", "AxisVar",
    "Definition", "TensorSpec", "LANGUAGES", "BuildSpec", "Solution", "SourceFile",
    "Correctness", "Environment", "Evaluation", "EvaluationStatus", "Performance", "Trace",
    "RandomInput", "SafetensorsInput", "ScalarInput", "Workload", "parse",
]


def parse(model, obj, dialect: str = "fib"):
    """Validate ``obj`` as ``model`` in a dialect (``"fib"`` or ``"flashinfer"``)."""
    return model.model_validate(obj, context={"dialect": dialect})
