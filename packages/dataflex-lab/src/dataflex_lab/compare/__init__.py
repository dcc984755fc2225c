"""Does a method beat the baseline? Multi-seed comparison of training runs with confidence intervals.

``dataflex compare`` reads runs' logs (:mod:`.readers`), reduces each run's
curve to its final-window mean and its area under the curve, and compares
each arm with the baseline over seeds (:func:`compare_runs`). A demo calls
it directly at the end of a multi-seed run:

    report = compare_runs(document, baseline="sync")  # a dataflex-demo/1 dict, or Run objects
    print(report.markdown())
"""

from .comparison import DEFAULT_METRICS, DEFAULT_WINDOW, compare_runs, summarize_curve
from .readers import DEMO_FORMAT, RunSpec, read_path, read_runs, runs_from_demo
from .report import REPORT_FORMAT, ComparisonReport
from .results import ArmResult, Difference, Estimate, MetricResult
from .runs import CompareError, Run

__all__ = [
    "DEFAULT_METRICS",
    "DEFAULT_WINDOW",
    "DEMO_FORMAT",
    "REPORT_FORMAT",
    "ArmResult",
    "CompareError",
    "ComparisonReport",
    "Difference",
    "Estimate",
    "MetricResult",
    "Run",
    "RunSpec",
    "compare_runs",
    "read_path",
    "read_runs",
    "runs_from_demo",
    "summarize_curve",
]
