"""PNG curves of a comparison (matplotlib, Agg backend): one colour per method, mean over seeds with a ±sd band.

- ``val_vs_step.png`` / ``val_vs_rollouts.png``: validation accuracy; seeds are averaged on the union of their
  x values by linear interpolation inside each run's range (a point where only some seeds exist averages those);
- ``zero_signal.png``: share of trained groups that were all right or all wrong, per step;
- ``pool.png``: the pool and feedback metrics logged by every run of the comparison (``POOL_KEYS``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from verl_ext.compare.align import interpolate, zero_signal_series
from verl_ext.compare.runs import Run
from verl_ext.compare.summary import RunSummary, mean_sd

POOL_KEYS = ("pool/size_live", "pool/size_scored", "pool/frac_near_target", "pool/size_cold", "pool/size_archive",
             "feedback/mean_pass_rate", "select/frac_boundary", "augment/inserted")


def _pyplot():
    try:
        import matplotlib
    except ImportError as err:
        raise ImportError("plots need matplotlib (pip install matplotlib, or pass --no-plots)") from err
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def mean_curve(curves: Sequence[Sequence[tuple[float, float]]]) -> list[tuple[float, float, float]]:
    """(x, mean, sd) on the union of the curves' x values, each curve interpolated within its own range."""
    xs = sorted({x for c in curves for x, _ in c})
    out = []
    for x in xs:
        m, sd, n = mean_sd([interpolate(list(c), x) for c in curves])
        if n:
            out.append((x, m, sd))
    return out


def _band(ax, curves, label, color) -> None:
    pts = mean_curve(curves)
    if not pts:
        return
    xs, ms, sds = [p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts]
    ax.plot(xs, ms, marker="o", ms=3, label=label, color=color)
    if len(curves) > 1:
        ax.fill_between(xs, [m - s for m, s in zip(ms, sds)], [m + s for m, s in zip(ms, sds)], color=color,
                        alpha=0.2)


def _methods(summaries: Sequence[RunSummary]) -> list[str]:
    return list(dict.fromkeys(s.method for s in summaries))


def plot_all(runs: Sequence[Run], summaries: Sequence[RunSummary], out: Path, dpi: int = 120) -> list[Path]:
    """Write the PNGs into ``out``; returns their paths."""
    plt = _pyplot()
    methods = _methods(summaries)
    colors = {m: plt.get_cmap("tab10")(i % 10) for i, m in enumerate(methods)}
    by_method_runs = {m: [r for r in runs if r.method == m] for m in methods}
    by_method_sums = {m: [s for s in summaries if s.method == m] for m in methods}
    written = []

    def save(fig, name: str) -> None:
        path = out / name
        fig.tight_layout()
        fig.savefig(path, dpi=dpi)
        plt.close(fig)
        written.append(path)

    for name, xi, xlabel in (("val_vs_step.png", 0, "training step"), ("val_vs_rollouts.png", 1, "rollouts")):
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for m in methods:
            _band(ax, [[(p[xi], p[2]) for p in s.val_points] for s in by_method_sums[m]], m, colors[m])
        ax.set_xlabel(xlabel)
        ax.set_ylabel("validation accuracy")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, name)

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for m in methods:
        _band(ax, [zero_signal_series(r) for r in by_method_runs[m]], m, colors[m])
    ax.set_xlabel("training step")
    ax.set_ylabel("all-correct + all-wrong groups (share)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, "zero_signal.png")

    keys = [k for k in POOL_KEYS if any(k in r.keys() for r in runs)]
    if keys:
        cols = 2
        rows = (len(keys) + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(10, 2.8 * rows), squeeze=False)
        for ax, key in zip(axes.flat, keys):
            for m in methods:
                _band(ax, [r.series(key) for r in by_method_runs[m] if key in r.keys()], m, colors[m])
            ax.set_title(key, fontsize=9)
            ax.grid(alpha=0.3)
        for ax in list(axes.flat)[len(keys):]:
            ax.axis("off")
        axes.flat[0].legend(fontsize=7)
        fig.supxlabel("training step", fontsize=9)
        save(fig, "pool.png")
    return written
