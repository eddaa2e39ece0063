"""Loss / accuracy curves of a training run as a PNG (matplotlib, the optional ``plot`` extra)."""
from __future__ import annotations

from pathlib import Path

from gpugrad.cli.checkpoint import OutputPathError, atomic_write, output_path

INSTALL_HINT = "pip install 'gpugrad[plot]'"


class PlotUnavailable(RuntimeError):
    pass


def require_matplotlib():
    """Import matplotlib with the file-only Agg backend, or raise PlotUnavailable saying how to install it."""
    try:
        import matplotlib
    except ImportError:
        raise PlotUnavailable(f"--plot needs matplotlib, which is not installed: {INSTALL_HINT}") from None
    matplotlib.use("Agg")  # NOTE: no display needed; must run before pyplot is imported
    import matplotlib.pyplot as plt

    return plt


def _format(path):
    """The image format named by ``path``'s suffix (png, pdf, svg, ...); png when it has none."""
    return Path(path).suffix.lower().lstrip(".") or "png"


def check_plot_path(path, what="--plot"):
    """Fail fast, before any long work: matplotlib present, a format it writes, a file path whose directory exists
    (created here) -- raises PlotUnavailable or checkpoint.OutputPathError, each with one line."""
    require_matplotlib()
    from matplotlib.backend_bases import FigureCanvasBase  # NOTE: optional: only once require_matplotlib found it

    types = FigureCanvasBase.get_supported_filetypes()
    if _format(path) not in types:
        raise OutputPathError(f"{what} {path}: unknown image format {_format(path)!r}; use one of {', '.join(types)}")
    return output_path(path, what)


def save_figure(fig, path, what="--plot"):
    """``fig`` written atomically to ``path`` in the format its suffix names (no suffix: png, and none is added:
    the file is exactly ``path``)."""
    return atomic_write(path, lambda f: fig.savefig(f, format=_format(path), dpi=100), what)


def plot_history(history, path, title="gpugrad train"):
    """Two panels from per-epoch metrics dicts: train/test loss and test accuracy (%) against epoch."""
    plt = require_matplotlib()
    epochs = [m["epoch"] for m in history]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    ax_loss.plot(epochs, [m["train_loss"] for m in history], marker="o", label="train loss")
    ax_loss.plot(epochs, [m["test_loss"] for m in history], marker="o", label="test loss")
    ax_loss.set(xlabel="epoch", ylabel="cross-entropy", yscale="log", title="loss")
    ax_loss.legend()
    ax_acc.plot(epochs, [100 * m["test_acc"] for m in history], marker="o", color="tab:green")
    ax_acc.set(xlabel="epoch", ylabel="test accuracy (%)", title="test accuracy")
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    try:
        return save_figure(fig, path)
    finally:
        plt.close(fig)
