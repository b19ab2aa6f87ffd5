"""What the study charts share (scripts/plot_speed_study.py, scripts/plot_memory_study.py):
their command line, matplotlib without a display, and the rows file a study script writes
(one run a line, tab-separated fields)."""
import sys


def args(script):
    """(ROWS.tsv, OUT.png) from the command line, or exit with the usage."""
    if len(sys.argv) != 3:
        sys.exit("usage: %s ROWS.tsv OUT.png" % script)
    return sys.argv[1], sys.argv[2]


def pyplot():
    """matplotlib.pyplot drawing to files only, or exit naming what is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("error: matplotlib is not installed (pip install matplotlib)")
    return plt


def read_rows(path, fields, study):
    """The rows of a study's rows file, each with at least `fields` fields, or exit."""
    try:
        rows = [l.rstrip("\n").split("\t") for l in open(path) if l.strip()]
    except OSError as e:
        sys.exit("error: %s: %s" % (path, e.strerror))
    if not rows or any(len(r) < fields for r in rows):
        sys.exit("error: %s: not a %s rows file (%d tab-separated fields a line)" % (path, study, fields))
    return rows
