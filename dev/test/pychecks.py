"""dev/test/pychecks.py: what the Python tests of the plotting scripts share: one line per check
("ok" or "FAIL" with the last lines of its detail), the counts, the verdict's exit status (0, 1
on a failure, 77 when all that could run passed but matplotlib is missing), and reading a
PNG's size from its header, so that a drawing is checked as a whole file without matplotlib."""
import importlib.util
import struct
import sys

counts = {"passed": 0, "failed": 0}


def check(what, ok, detail=""):
    if ok:
        counts["passed"] += 1
        print(f"ok    {what}")
    else:
        counts["failed"] += 1
        print(f"FAIL  {what}")
        for line in detail.strip().splitlines()[-8:]:
            print(f"      {line}")


def have_matplotlib():
    return importlib.util.find_spec("matplotlib") is not None


def finish(drawing_checked):
    """the last line and the exit status; drawing_checked: matplotlib was there for the drawings"""
    if not drawing_checked:
        print(f"matplotlib is not installed for {sys.executable}: the drawing checks were skipped")
    print(f"{counts['passed']} passed, {counts['failed']} failed")
    if counts["failed"]:
        return 1
    return 0 if drawing_checked else 77


def png_size(path):
    """(width, height) from a PNG's IHDR, or None when the file is not a whole PNG"""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if len(data) < 45 or data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        return None
    if data[-8:-4] != b"IEND":  # a file cut short by a failed write has no end chunk
        return None
    return struct.unpack(">II", data[16:24])
