#!/usr/bin/env python3
"""The speed study's chart (scripts/study_speed.sh): tokens/s of each row, train_gpt2cu's
beside PyTorch's, for the rows that add one technique at a time (1_baseline .. 9_full_default).

    python3 scripts/plot_speed_study.py out/study_speed/rows.tsv docs/img/speed_study.png
"""
import sys

import study_plot


def main():
    rows_path, out_path = study_plot.args("plot_speed_study.py")
    plt = study_plot.pyplot()
    rows = study_plot.read_rows(rows_path, 9, "study_speed.sh")
    steps = sorted({r[1] for r in rows if r[1][:1].isdigit()})
    if not steps:
        sys.exit("error: %s has no study rows (1_baseline ..)" % rows_path)

    def tps(program, row):
        for r in rows:
            if r[0] == program and r[1] == row and r[3] not in ("-", "None"):
                return float(r[3])
        return 0.0

    fig, ax = plt.subplots(figsize=(11, 5))
    x = range(len(steps))
    ours = [tps("ours", s) for s in steps]
    torch = [tps("pytorch", s) for s in steps]
    ax.bar([i - 0.2 for i in x], ours, width=0.4, label="train_gpt2cu", color="#1f77b4")
    ax.bar([i + 0.2 for i in x], torch, width=0.4, label="PyTorch", color="#d62728")
    for i, (a, b) in enumerate(zip(ours, torch)):
        for off, v in ((-0.2, a), (0.2, b)):
            ax.text(i + off, v, "%.0fk" % (v / 1e3) if v else "-", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(list(x))
    ax.set_xticklabels([s.split("_", 1)[1].replace("_", " ") for s in steps], rotation=20, fontsize=8)
    ax.set_ylabel("tokens/s")
    ax.set_title("GPT-2 124M, T=1024: one technique added per row")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)
    print("wrote %s" % out_path)


if __name__ == "__main__":
    main()
