"""The report's charts as PNG bytes: budget burn-down, suite trajectories, IFEval guard.

Each function takes the same rows the report's tables show (agent/views/report.py computes them
once) and returns a PNG, so report.md links the file and report.html embeds the bytes. Sized
for a laptop-width page (about 1000 px wide at 100 dpi); matplotlib's Agg backend, no display.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from experience_bank.families import PRIMARY_METRIC

WIDTH_IN, HEIGHT_IN, DPI = 10.0, 3.6, 100
OUTCOME_COLOURS = {"promoted": "#1a7f37", "rolled_back": "#cf222e", "trial_failed": "#bf8700",
                   "not_started": "#8c959f", "rejected": "#8c959f"}


def _plt():
    import matplotlib  # noqa: PLC0415 (matplotlib)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 (matplotlib)

    return plt


def _integer_x(ax) -> None:
    from matplotlib.ticker import MaxNLocator  # noqa: PLC0415 (matplotlib)

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    _plt().close(fig)
    return buf.getvalue()


def burn_down_chart(events: Sequence[Any], budget_h: float, spent_h: float) -> bytes:
    """Device-hours left after each decision, the ledger's total (shared evaluations included)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI, layout="constrained")
    left, xs, ys = budget_h, [0], [budget_h]
    for e in events:
        left -= e.cost_device_hours
        xs.append(e.seq + 1)
        ys.append(left)
    ax.step(xs, ys, where="post", color="#0969da", label="left after each decision (its own charges)")
    for e, y in zip(events, ys[1:]):
        if e.cost_device_hours > 0:
            ax.annotate(e.candidate_id, (e.seq + 1, y), textcoords="offset points", xytext=(2, 4), fontsize=7)
    ax.scatter([xs[-1]], [budget_h - spent_h], color="#cf222e", zorder=3,
               label=f"ledger total: {spent_h:.2f} of {budget_h:g} h spent")
    ax.axhline(0.0, color="#444", linewidth=0.8)
    ax.set(xlabel="decisions made", ylabel="device-hours left", ylim=(min(0.0, budget_h - spent_h) - 0.5, budget_h * 1.05),
           title="Budget burn-down")
    ax.legend(loc="lower left", fontsize=8)
    _integer_x(ax)
    return _png(fig)


def _primary(column: str) -> bool:
    suite, _, metric = column.partition(".")
    return metric in PRIMARY_METRIC.values() or column == "ifeval.prompt_strict"


def trajectory_chart(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> bytes:
    """Each suite's primary metric on the adoption split: the initial parent, then every promotion."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI, layout="constrained")
    labels = [str(r[0]) for r in rows]
    for j, col in enumerate(header[1:], start=1):
        if not _primary(col):
            continue
        ys = [r[j] for r in rows]
        ax.plot(range(len(rows)), [float("nan") if y is None else y for y in ys], marker="o", label=col)
    ax.set_xticks(range(len(rows)), labels)
    ax.set(xlabel="model (initial parent, then each promoted child)", ylabel="score (adoption split)",
           title="Suite trajectories across promotions")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    return _png(fig)


def ifeval_chart(points: Sequence[dict[str, Any]], initial: dict[str, float], drop_pp: float) -> bytes:
    """IFEval strict accuracies of every child the gate judged, against the guard (initial - drop)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI, layout="constrained")
    for k, (metric, colour) in enumerate((("prompt_strict", "#0969da"), ("inst_strict", "#8250df"))):
        xs = [p["seq"] for p in points if metric in p]
        ax.plot(xs, [p[metric] for p in points if metric in p], color=colour, marker="", linewidth=1,
                label=f"ifeval.{metric} of the child")
        for p in points:
            if metric in p:
                ax.scatter(p["seq"], p[metric], color=OUTCOME_COLOURS.get(p["outcome"], "#444"), zorder=3, s=28)
        if metric in initial:
            ax.axhline(initial[metric], color=colour, linestyle=":", linewidth=1, label=f"initial {metric}")
            ax.axhline(initial[metric] - drop_pp, color=colour, linestyle="--", linewidth=1.2,
                       label=f"guard: initial - {drop_pp:g} pp")
    for p in points:
        ax.annotate(p["candidate"], (p["seq"], p.get("prompt_strict", p.get("inst_strict", 0.0))),
                    textcoords="offset points", xytext=(3, 5), fontsize=7)
    ax.set(xlabel="decision (children that reached the gate; green promoted, red rolled back)",
           ylabel="accuracy (%)", title="IFEval guard over time")
    if points:  # one tick per judged decision (at most the catalogue's size)
        ax.set_xlim(min(p["seq"] for p in points) - 0.5, max(p["seq"] for p in points) + 0.5)
        ax.set_xticks(sorted({p["seq"] for p in points}))
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    return _png(fig)
