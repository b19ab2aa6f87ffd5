#!/usr/bin/env python3
"""The memory study's chart (scripts/study_memory.sh): for each model, one bar per row with
its device memory at peak (the trainer's own figure; nvidia-smi's per-process figure for
rows that share the GPU and for PyTorch's), labelled with tokens/s; a run that failed gets
no bar, only its exit status. Budgets are drawn as dashed lines.

    python3 scripts/plot_memory_study.py out/study_memory/rows.tsv docs/img/memory_study.png
"""
import study_plot


def main():
    rows_path, out_path = study_plot.args("plot_memory_study.py")
    plt = study_plot.pyplot()
    rows = study_plot.read_rows(rows_path, 13, "study_memory.sh")
    models = [m for m in ("d48", "d24", "d12") if any(r[1] == m for r in rows)]
    budgets = {"d48": 16, "d24": 8, "d12": 4}
    fig, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 7), squeeze=False)
    for ax, model in zip(axes[0], models):
        mine = [r for r in rows if r[1] == model]
        labels, values, colours, notes = [], [], [], []
        for r in mine:
            if not r[12].startswith("rc=0"):
                # a run that failed (out of memory, say) has no peak to draw: its bar is empty
                labels.append(("PyTorch: " if r[0] == "pytorch" else "") + r[3])
                values.append(0.0)
                colours.append("none")
                notes.append("failed (%s)" % r[12].split()[0])
                continue
            own = r[0] == "ours" and r[5] != "-"
            mib = float(r[5] if own else r[6]) if (r[5] if own else r[6]) not in ("-", "None", "0") else 0.0
            labels.append(("PyTorch: " if r[0] == "pytorch" else "") + r[3])
            values.append(mib / 1024)
            colours.append("#d62728" if r[0] == "pytorch" else "#2ca02c" if "offload" in r[3] else "#1f77b4")
            notes.append("%s tok/s" % r[8] if r[8] not in ("-", "None") else "memory only")
        y = range(len(values))
        ax.barh(list(y), values, color=colours)
        for i, (v, n) in enumerate(zip(values, notes)):
            ax.text(v, i, " %.1f GiB, %s" % (v, n), va="center", fontsize=7)
        ax.set_yticks(list(y))
        ax.set_yticklabels(labels, fontsize=7)
        ax.invert_yaxis()
        ax.axvline(budgets[model], linestyle="--", color="grey")
        ax.set_xlabel("device memory at peak, GiB (dashed: %d GiB)" % budgets[model])
        ax.set_title("GPT-2 %s, T=1024, 524,288 tokens/step" % model)
        ax.set_xlim(0, max(values + [budgets[model]]) * 1.45)
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)
    print("wrote %s" % out_path)


if __name__ == "__main__":
    main()
