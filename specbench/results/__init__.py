"""What a run stores and how it is read back: ``records`` (raw request and cell
records, the source of truth), ``requests`` (what an engine is asked to run),
``summary`` / ``parts`` (``summary.json``'s typed model), ``manifest`` (``manifest.json``'s
typed model and :func:`~specbench.results.manifest.build_manifest`), ``environment`` (the
machine facts a manifest records), ``migrations`` (schema versions and loaders of older files),
``rundir`` (the only reader and writer of a run directory's files), ``fmt`` (how a number with its
interval is written), ``counters`` and ``speed_estimators`` (τ and the speed estimators, each formula
written once), ``metric_catalog`` (every metric declared once: field, unit,
direction, digits, definition), ``slices`` (a group's optional slice keys) and ``noise_calibration``
(an A/A speed-noise calibration: its model and file).
"""

from specbench._lazy import exports

__getattr__, __dir__ = exports(__name__, {
    "RequestRecord": "records",
    "CellRecord": "records",
    "SpecCounters": "records",
    "PreparedPrompt": "requests",
    "StoredPrompt": "requests",
    "SamplingRequest": "requests",
    "CellRequest": "requests",
    "CellOutcome": "requests",
    "ScoreItem": "requests",
    "ScoreResult": "requests",
    "ScoreRow": "requests",
    "GroupSummary": "summary",
    "RunSummary": "summary",
    "RunManifest": "manifest",
    "TimeBreakdown": "manifest",
    "SchemaError": "migrations",
    "fmt_est": "fmt",
    "MetricSpec": "metric_catalog",
    "Slice": "slices",
    "NoiseCalibration": "noise_calibration",
})
__all__ = sorted(__dir__())
