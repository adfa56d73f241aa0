#!/usr/bin/python3
"""Plots the per-epoch CSV that train_fashion_mnist writes with --log: loss and accuracy curves.

    /usr/bin/python3 examples/plot_training.py run.csv [more.csv ...] [-o curves.png]

Each CSV becomes one set of curves (labelled by its file name, one colour per file): training
(solid) and test (dashed) loss, training and test accuracy, and the learning rate at each epoch's
first step, over whole epochs. Needs matplotlib (Debian: python3-matplotlib). Logs written before
test_loss or lr were recorded plot without them.
"""
import argparse
import csv
import os
import sys

EXPECTED = ["epoch", "train_loss", "train_acc", "test_acc", "samples_per_sec", "seconds"]
OPTIONAL = ["test_loss", "lr"]


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

    logs = [(path, read_log(path)) for path in args.logs]
    with_lr = any("lr" in log for _, log in logs)
    fig, axes = plt.subplots(1, 3 if with_lr else 2, figsize=(16 if with_lr else 11, 4.2))
    loss_ax, acc_ax = axes[0], axes[1]
    for path, log in logs:
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
        if "lr" in log:
            axes[2].plot(log["epoch"], log["lr"], marker="o", color=train_line.get_color(),
                         label=name)
    loss_ax.set(xlabel="epoch", ylabel="loss", title="Loss")
    acc_ax.set(xlabel="epoch", ylabel="accuracy", title="Accuracy")
    if with_lr:
        axes[2].set(xlabel="epoch", ylabel="learning rate", title="Learning rate (epoch's start)")
        rates = [r for _, log in logs for r in log.get("lr", []) if r > 0]
        if rates and max(rates) > 20 * min(rates):  # e.g. sgd's 0.1 beside adam's 0.001
            axes[2].set_yscale("log")
    from matplotlib.ticker import MaxNLocator
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # whole epochs
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(output, dpi=120)
    print(output)


if __name__ == "__main__":
    main()
