"""The CapTrack heat map: capabilities (groups and sub-capabilities) x candidates or episode steps.

Input is plain numbers, `{column: {row: drift_pct or None}}`, as the agent reads them off
`policies.gate.captrack_profile` (evaluators/ may not import policies/). The PNG and the JSON
carry the same matrix; None (UNKNOWN, or a base below the floor) is drawn grey as `n/a`,
never as 0. Rendering uses matplotlib's Agg backend: no display is needed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from experience_bank.errors import BadInput

Table = Mapping[str, Mapping[str, float | None]]
CLIP_PCT = 25.0  # colour saturates here: past the catastrophic line (-20 %) every shade reads the same


def _grouped(rows: list[str]) -> list[str]:
    """Each group, then its sub-capabilities (`CAN`, `CAN/C1`, `CAN/C5a`, `WILL`, ...), groups in first-seen order."""
    groups = list(dict.fromkeys(r.partition("/")[0] for r in rows))
    return sorted(rows, key=lambda r: (groups.index(r.partition("/")[0]), "/" in r, r))


def heatmap_data(table: Table, rows: Sequence[str] | None = None) -> dict:
    """The matrix as JSON: {"rows", "columns", "drift_pct": rows x columns}."""
    columns = list(table)
    if not columns:
        raise BadInput("the heat map needs at least one candidate or step column")
    order = list(rows) if rows is not None else _grouped(list(dict.fromkeys(r for c in columns for r in table[c])))
    matrix = [[table[c].get(r) for c in columns] for r in order]
    bad = [v for line in matrix for v in line if v is not None and not math.isfinite(v)]
    if bad:
        raise BadInput(f"heat map value {bad[0]} is not finite; pass None for an unknown drift")
    return {"rows": order, "columns": columns, "drift_pct": matrix}


# What each row means (docs/GATE.md section 1's taxonomy); which metrics feed a row is
# evaluators.scoring.suites.metric_specs() (the one owner of that mapping), read by `legend`.
CAPABILITIES = {
    "CAN": "latent competence", "CAN/C1": "knowledge and skills", "CAN/C2": "multi-step reasoning",
    "CAN/C3": "in-context understanding", "CAN/C4": "truthfulness", "CAN/C5a": "paraphrase invariance",
    "CAN/C5b": "distribution shift", "CAN/C5c": "multilingual stability",
    "WILL": "default behaviour", "WILL/W1": "willingness (over-refusal)", "WILL/W2": "coverage vs overreach",
    "WILL/W3": "style (length, format markers)",
    "HOW": "protocol compliance", "HOW/H1": "instruction following", "HOW/H2": "output format / JSON",
    "HOW/H3": "tool / function calling", "HOW/H4": "multi-turn state", "HOW/H5": "long context",
    "HOW/H6": "citation",
}


def row_label(row: str) -> str:
    """`CAN/C1` -> `CAN/C1 knowledge and skills` (an unknown row keeps its bare name)."""
    return f"{row} {CAPABILITIES[row]}" if row in CAPABILITIES else row


def legend(rows: Sequence[str]) -> list[tuple[str, str, list[str]]]:
    """(row, meaning, metrics behind it) for each row: a group lists its metrics, a sub its own."""
    from evaluators.scoring.suites import metric_specs  # noqa: PLC0415

    specs = metric_specs()
    out = []
    for row in rows:
        group, _, sub = row.partition("/")
        names = [m.name for m in specs if m.group == group and (not sub or m.sub == sub)]
        out.append((row, CAPABILITIES.get(row, ""), names))
    return out


def heatmap_figure(data: dict, title: str):
    """The matplotlib Figure (Agg): rows labelled with their meaning, the title wrapped to fit."""
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import TwoSlopeNorm

    values = np.array([[np.nan if v is None else v for v in row] for row in data["drift_pct"]], dtype=float)
    n_rows, n_cols = values.shape
    width = max(7.0, 3.6 + 1.0 * n_cols)  # room for the row labels and the colour bar
    fig, ax = plt.subplots(figsize=(width, 1.6 + 0.42 * n_rows), dpi=100, layout="constrained")
    cmap = matplotlib.colormaps["RdBu"].with_extremes(bad="#d0d0d0")
    img = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, aspect="auto",
                    norm=TwoSlopeNorm(vcenter=0.0, vmin=-CLIP_PCT, vmax=CLIP_PCT))
    for (i, j), v in np.ndenumerate(values):
        dark = not np.isnan(v) and abs(v) > 0.6 * CLIP_PCT  # white text on the saturated ends
        ax.text(j, i, "n/a" if np.isnan(v) else f"{v:+.1f}", ha="center", va="center", fontsize=8,
                color="white" if dark else "black")
    ax.set_xticks(range(n_cols), data["columns"], rotation=30, ha="right")
    ax.set_yticks(range(n_rows), [row_label(r) for r in data["rows"]])
    fig.suptitle("\n".join(textwrap.wrap(title, width=int(width * 9))), fontsize=11)
    fig.colorbar(img, ax=ax, label="relative drift vs the initial parent (%)")
    return fig


def _draw(data: dict, png: Path, title: str) -> None:
    import matplotlib.pyplot as plt

    fig = heatmap_figure(data, title)
    fig.savefig(png)
    plt.close(fig)


def write_heatmap(table: Table, png: str | Path, json_path: str | Path, *, rows: Sequence[str] | None = None,
                  title: str = "CapTrack drift") -> dict:
    """Write the PNG and the JSON of the same matrix; returns the JSON data."""
    data = heatmap_data(table, rows)
    png, json_path = Path(png), Path(json_path)
    png.parent.mkdir(parents=True, exist_ok=True)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    _draw(data, png, title)
    json_path.write_text(json.dumps({"title": title, **data}, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    return data
