"""The local dashboard: one self-contained HTML page per run directory.

Built from the run's own files (``metrics.jsonl``, ``tasks/``, checkpoints), which
resume already keeps exact, so the page never disagrees with the run. It has no
script and loads nothing from the network: it opens from a cluster node's disk, a
copied file, or ``selfplay dashboard RUN_DIR --serve``. Charts are inline SVG; the
round selector of the proposals is one ``<details>`` element per round.

The package: ``data`` reads the run's files, ``charts`` draws SVG from numbers, ``page`` lays
out the pages, ``server`` serves them. What other modules use is re-exported here.
"""
from curriculum.dashboard.charts import line_chart, nice_ticks, tick_labels
from curriculum.dashboard.data import (RoundDigest, band, load_records, per_round, round_digest, series, tiers,
                                       token_series)
from curriculum.dashboard.page import (BENCHMARK, COLUMNS, COMPARE, CURRICULUM, TRAINING, Chart, alarm_markers,
                                       columns, render, render_compare, write)
from curriculum.dashboard.server import serve

__all__ = ["BENCHMARK", "COLUMNS", "COMPARE", "CURRICULUM", "TRAINING", "Chart", "RoundDigest", "alarm_markers",
           "band", "columns", "line_chart", "load_records", "nice_ticks", "per_round", "render", "render_compare",
           "round_digest", "series", "serve", "tick_labels", "tiers", "token_series", "write"]
