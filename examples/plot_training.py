#!/usr/bin/python3
"""Plots the per-epoch CSV that train_fashion_mnist writes with --log: loss and accuracy curves.

    /usr/bin/python3 examples/plot_training.py run.csv [more.csv ...] [-o curves.png]

Each CSV becomes one set of curves (labelled by its file name): training and test loss on the
left, training and test accuracy on the right, over whole epochs. Needs matplotlib (Debian:
python3-matplotlib). Logs written before test_loss was recorded plot without it.
"""
import argparse
import csv
import os
import sys

EXPECTED = ["epoch", "train_loss", "train_acc", "test_acc", "samples_per_sec", "seconds"]
OPTIONAL = ["test_loss"]


def read_log(path):
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        sys.exit(f"plot_training: cannot read {path}: {e.strerror}")
    if not rows or any(k not in rows[0] for k in EXPECTED):
        sys.exit(f"plot_training: {path} is not a train_fashion_mnist log "
                 f"(expected the columns {', '.join(EXPECTED)})")
    try:
        return {k: [float(r[k]) for r in rows] for k in EXPECTED + OPTIONAL if k in rows[0]}
    except (TypeError, ValueError):
        sys.exit(f"plot_training: {path} has a row that is not numbers")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="+", help="CSV files written with --log")
    parser.add_argument("-o", "--output", help="PNG to write (default: the first CSV's name "
                        "with .png)")
    args = parser.parse_args()
    output = args.output or os.path.splitext(args.logs[0])[0] + ".png"

    import matplotlib
    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    for path in args.logs:
        log = read_log(path)
        name = os.path.splitext(os.path.basename(path))[0]
        train_line, = loss_ax.plot(log["epoch"], log["train_loss"], marker="o",
                                   label=f"{name} train")
        if "test_loss" in log:
            loss_ax.plot(log["epoch"], log["test_loss"], linestyle="--",
                         color=train_line.get_color(), label=f"{name} test")
        # The same convention on both panels: solid train, dashed test, one colour per run.
        acc_ax.plot(log["epoch"], log["train_acc"], marker="o", color=train_line.get_color(),
                    label=f"{name} train")
        acc_ax.plot(log["epoch"], log["test_acc"], linestyle="--", color=train_line.get_color(),
                    label=f"{name} test")
    loss_ax.set(xlabel="epoch", ylabel="loss", title="Loss")
    acc_ax.set(xlabel="epoch", ylabel="accuracy", title="Accuracy")
    from matplotlib.ticker import MaxNLocator
    for ax in (loss_ax, acc_ax):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # whole epochs
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(output, dpi=120)
    print(output)


if __name__ == "__main__":
    main()
