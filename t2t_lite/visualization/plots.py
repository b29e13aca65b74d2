"""Curves of a run as PNGs, read from its TensorBoard event files (`--mode=plot`).

Writes into `output_dir/plots/`: `loss.png` (training loss and dev loss), `learning_rate.png`,
`dev_accuracy.png` (the problem's accuracy metrics) and `dev_bleu.png` (the `BLEU` of
decode_eval/ and decode/, when a decode with a reference wrote one, labelled with the file
scored), `dev_chrf.png`, `dev_chrfpp.png`, `dev_ter.png` (sacreBLEU's chrF2, chrF2++, TER
there, with --metrics), each against the global step; a curve of one point is its marker and
value. Needs
matplotlib (`pip install t2t_lite[viz]`).
"""
from __future__ import annotations

import os

import numpy as np

from t2t_lite.errors import UserError

PLOTS_DIR = "plots"


def _pyplot():
    """matplotlib.pyplot on the file-only Agg backend, or a UserError naming the extra."""
    try:
        import matplotlib
    except ImportError:
        raise UserError("pictures need matplotlib: pip install t2t_lite[viz] "
                        "(or pip install matplotlib)") from None
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


def _line_plot(plt, path: str, title: str, ylabel: str,
               curves: dict[str, list[tuple[int, float]]], log_y: bool = False) -> None:
    figure, axes = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    for label, points in curves.items():
        steps, values = zip(*points)
        axes.plot(steps, values, marker="o" if len(points) < 30 else None, markersize=3,
                  label=label)
        if len(points) == 1:  # a single point: its marker and its value, no line to read
            axes.annotate(f"{values[0]:.4g}", (steps[0], values[0]),
                          textcoords="offset points", xytext=(6, 6))
    axes.set_title(title)
    axes.set_xlabel("global step")
    axes.set_ylabel(ylabel)
    if log_y and all(v > 0 for points in curves.values() for _, v in points):
        axes.set_yscale("log")
    axes.grid(True, alpha=0.3)
    if len(curves) > 1:
        axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def plot_run(output_dir: str) -> list[str]:
    """Writes the PNGs of a run's curves (see the module docstring).

    Args:
      output_dir: the training run's directory (events there, in eval/ and in decode/).

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
    plots_dir = os.path.join(output_dir, PLOTS_DIR)
    os.makedirs(plots_dir, exist_ok=True)
    written = []

    def plot(name, title, ylabel, curves, log_y=False):
        curves = {label: points for label, points in curves.items() if points}
        if curves:
            path = os.path.join(plots_dir, name)
            _line_plot(plt, path, title, ylabel, curves, log_y)
            written.append(path)

    plot("loss.png", "Loss (cross-entropy per token)", "loss",
         {"training": train.get("loss", []), "dev": dev.get("loss", [])}, log_y=True)
    plot("learning_rate.png", "Learning rate", "learning rate",
         {"learning rate": train.get("learning_rate", [])})
    accuracy = {tag.rsplit("/", 1)[-1]: points for tag, points in sorted(dev.items())
                if tag.startswith("metrics-") and "accuracy" in tag.rsplit("/", 1)[-1]}
    plot("dev_accuracy.png", "Dev accuracy (teacher-forced)", "accuracy", accuracy)
    bleu_title, bleu = bleu_curves(output_dir, dev_decode.get("BLEU", []), decode.get("BLEU", []))
    plot("dev_bleu.png", bleu_title, "BLEU", bleu)
    # sacreBLEU's other metrics (--metrics=chrf,chrf++,ter), one picture each.
    for tag, filename in (("chrF2", "dev_chrf.png"), ("chrF2++", "dev_chrfpp.png"),
                          ("TER", "dev_ter.png")):
        title, curves = bleu_curves(output_dir, dev_decode.get(tag, []), decode.get(tag, []),
                                    tag)
        plot(filename, title, tag, curves)
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
