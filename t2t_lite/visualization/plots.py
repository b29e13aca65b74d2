"""Curves of a run as PNGs, read from its TensorBoard event files (`--mode=plot`).

Writes into `output_dir/plots/`: `loss.png` (training loss and dev loss), `learning_rate.png`,
`dev_accuracy.png` (the problem's accuracy metrics) and `dev_bleu.png` (the `BLEU` of
decode_eval/ and decode/, when a decode with a reference wrote one, labelled with the file
scored), `dev_chrf.png`, `dev_chrfpp.png`, `dev_ter.png` (sacreBLEU's chrF2, chrF2++, TER
there, with --metrics), each against the global step; a curve of one point is its marker and
value. Needs
matplotlib (the [viz] extra).
"""
from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from t2t_lite.errors import UserError
from t2t_lite.utils import extras

PLOTS_DIR = "plots"


def _pyplot():
    """matplotlib.pyplot on the file-only Agg backend, or a UserError naming the extra."""
    with extras.needed("viz", "drawing pictures (--mode=plot, --mode=attention)"):
        import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def read_scalars(directory: str) -> dict[str, list[tuple[int, float]]]:
    """Scalar summaries of one event directory (not its subdirectories), tensor or
    legacy scalar events alike.

    Returns:
      tag -> [(step, value), ...] sorted by step ({} when there are no events).
    """
    from tensorboard.backend.event_processing import event_accumulator

    if not os.path.isdir(directory):
        return {}
    accumulator = event_accumulator.EventAccumulator(
        directory, size_guidance={event_accumulator.TENSORS: 0, event_accumulator.SCALARS: 0})
    accumulator.Reload()
    tags = accumulator.Tags()
    series: dict[str, dict[int, float]] = {}
    for tag in tags.get("tensors", []):
        for event in accumulator.Tensors(tag):
            value = _tensor_value(event.tensor_proto)
            if value is not None:
                series.setdefault(tag, {})[event.step] = value
    for tag in tags.get("scalars", []):
        for event in accumulator.Scalars(tag):
            series.setdefault(tag, {})[event.step] = float(event.value)
    return {tag: sorted(points.items()) for tag, points in series.items()}


def scalar_description(directory: str, tag: str) -> str:
    """The description a scalar summary was written with ("" when none; decode's `BLEU`
    names its reference file there)."""
    from tensorboard.backend.event_processing import event_accumulator

    if not os.path.isdir(directory):
        return ""
    accumulator = event_accumulator.EventAccumulator(
        directory, size_guidance={event_accumulator.TENSORS: 1})
    accumulator.Reload()
    try:
        return accumulator.SummaryMetadata(tag).summary_description
    except KeyError:
        return ""


def bleu_curves(output_dir: str, dev_decode: list, decode: list,
                tag: str = "BLEU") -> tuple[str, dict]:
    """(title, label -> points) of the BLEU picture (or chrF2, chrF2++, TER: `tag`): the dev
    set's score of train_eval_and_decode, and `--mode=decode`'s labelled with the reference
    file it was scored against (a test file is not called "dev")."""
    reference = scalar_description(os.path.join(output_dir, "decode"), tag) if decode else ""
    label = (f"--mode=decode against {os.path.basename(reference)}" if reference
             else "--mode=decode with a reference")
    curves = {"dev set (train_eval_and_decode)": dev_decode, label: decode}
    curves = {name: points for name, points in curves.items() if points}
    title = f"{tag} of the decodes" if decode else f"Dev {tag} (train_eval_and_decode)"
    return title, curves


def _tensor_value(proto) -> float | None:
    import tensorflow as tf

    value = tf.make_ndarray(proto)
    if value.dtype.kind not in "fiu" or value.size != 1:
        return None  # text summaries, histograms
    return float(value.reshape(()))


def line_figure(plt, title: str, ylabel: str, curves: dict[str, list[tuple[int, float]]],
                log_y: bool = False):
    """The figure of one picture of curves (not saved; the caller saves and closes it).

    Args:
      plt: matplotlib.pyplot.
      title, ylabel: the picture's title and y axis name.
      curves: label -> [(step, value), ...], each non-empty.
      log_y: a log scale for y (when every value is positive).

    Returns:
      A matplotlib Figure. The x axis is the global step in whole numbers. When every point is
      at one step (one evaluation so far) the axes run from step 0 to past that step and from 0
      (or a log decade around it) to past the value, so the point sits inside a scale one can
      read, with its value written beside it, instead of alone on an axis of +-100 steps.
    """
    from matplotlib.ticker import MaxNLocator

    figure, axes = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    for label, points in curves.items():
        steps, values = zip(*points)
        axes.plot(steps, values, marker="o" if len(points) < 30 else None,
                  markersize=6 if len(points) == 1 else 3, label=label)
        if len(points) == 1:  # a single point: its marker and its value, no line to read
            axes.annotate(f"{values[0]:.4g}", (steps[0], values[0]),
                          textcoords="offset points", xytext=(6, 6))
    axes.set_title(title)
    axes.set_xlabel("global step")
    axes.set_ylabel(ylabel)
    values = [v for points in curves.values() for _, v in points]
    log_y = log_y and all(v > 0 for v in values)
    if log_y:
        axes.set_yscale("log")
    steps = {step for points in curves.values() for step, _ in points}
    if len(steps) == 1:
        (step,) = steps
        axes.set_xlim(0, max(step, 1) * 1.25)
        low, high = min(values), max(values)
        if log_y:
            axes.set_ylim(low / 3.0, high * 3.0)
        elif low >= 0:
            axes.set_ylim(0, high * 1.3 if high > 0 else 1.0)
        axes.set_xlabel("global step (one evaluation so far)")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.grid(True, alpha=0.3)
    if len(curves) > 1:
        axes.legend(loc="best")
    figure.tight_layout()
    return figure


def _line_plot(plt, path: str, title: str, ylabel: str,
               curves: dict[str, list[tuple[int, float]]], log_y: bool = False) -> None:
    figure = line_figure(plt, title, ylabel, curves, log_y)
    figure.savefig(path)
    plt.close(figure)


def plot_run(output_dir: str,
             on_written: Callable[[str, int, int], None] | None = None) -> list[str]:
    """Writes the PNGs of a run's curves (see the module docstring).

    Args:
      output_dir: the training run's directory (events there, in eval/ and in decode/).
      on_written: called with (path, k, n) after the k-th of the n pictures is written.

    Returns:
      The PNG paths written (curves with no points are skipped).

    Raises:
      UserError: no event files with scalars in output_dir, or matplotlib missing.
    """
    plt = _pyplot()
    train = read_scalars(output_dir)
    dev = read_scalars(os.path.join(output_dir, "eval"))
    decode = read_scalars(os.path.join(output_dir, "decode"))
    dev_decode = read_scalars(os.path.join(output_dir, "decode_eval"))
    if not train and not dev:
        raise UserError(f"--output_dir={output_dir}: no TensorBoard scalars there or in eval/ "
                        "(train a model into it first)")
    pictures = []  # (file name, title, y label, curves, log_y)

    def picture(name, title, ylabel, curves, log_y=False):
        curves = {label: points for label, points in curves.items() if points}
        if curves:
            pictures.append((name, title, ylabel, curves, log_y))

    picture("loss.png", "Loss (cross-entropy per token)", "loss",
            {"training": train.get("loss", []), "dev": dev.get("loss", [])}, log_y=True)
    picture("learning_rate.png", "Learning rate", "learning rate",
            {"learning rate": train.get("learning_rate", [])})
    accuracy = {tag.rsplit("/", 1)[-1]: points for tag, points in sorted(dev.items())
                if tag.startswith("metrics-") and "accuracy" in tag.rsplit("/", 1)[-1]}
    picture("dev_accuracy.png", "Dev accuracy (teacher-forced)", "accuracy", accuracy)
    bleu_title, bleu = bleu_curves(output_dir, dev_decode.get("BLEU", []),
                                   decode.get("BLEU", []))
    picture("dev_bleu.png", bleu_title, "BLEU", bleu)
    # sacreBLEU's other metrics (--metrics=chrf,chrf++,ter), one picture each.
    for tag, filename in (("chrF2", "dev_chrf.png"), ("chrF2++", "dev_chrfpp.png"),
                          ("TER", "dev_ter.png")):
        title, curves = bleu_curves(output_dir, dev_decode.get(tag, []), decode.get(tag, []),
                                    tag)
        picture(filename, title, tag, curves)
    plots_dir = os.path.join(output_dir, PLOTS_DIR)
    os.makedirs(plots_dir, exist_ok=True)
    written = []
    for k, (name, title, ylabel, curves, log_y) in enumerate(pictures, 1):
        path = os.path.join(plots_dir, name)
        _line_plot(plt, path, title, ylabel, curves, log_y)
        written.append(path)
        if on_written is not None:
            on_written(path, k, len(pictures))
    return written


def pixel_spread(path: str) -> float:
    """Standard deviation of a PNG's pixel values (0 for a blank picture); for tests."""
    plt = _pyplot()
    return float(np.std(plt.imread(path)))


def plot_run_if_possible(output_dir: str) -> list[str]:
    """`plot_run` at the end of train_and_eval: without matplotlib (or without scalars) it
    logs one line saying so instead of failing the finished run."""
    from absl import logging

    try:
        written = plot_run(output_dir)
    except UserError as e:
        logging.info("No plots: %s", e)
        return []
    logging.info("Curves written to %s", os.path.join(output_dir, PLOTS_DIR))
    return written
