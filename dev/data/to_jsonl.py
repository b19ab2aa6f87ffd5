#!/usr/bin/env python3
"""to_jsonl.py: turns dataset files into the JSONL that ./prepro --format jsonl reads:
one {"text": "..."} object per line, one line per document.

Inputs (the format comes from the file name, or --format):
  .json     one JSON array of objects (TinyStories' data00.json ... data49.json)
  .jsonl    one JSON object per line (blank lines are skipped)
  .parquet  a table with a string column (FineWeb's sample/10BT/*.parquet); needs
            pyarrow (python3 -m pip install pyarrow)

Every record must be an object (a row) whose FIELD is a string. A bad record (not an
object, FIELD missing, null or not a string, text that is not valid Unicode, an
unreadable JSONL line) is reported on stderr as FILE:INDEX: problem, where INDEX is the
0-based position in a .json array, the 1-based line of a .jsonl file, or the 0-based row
of a .parquet file. With bad records the exit status is 1 (and nothing is written with
--output) unless --skip-bad is given, which drops them and reports them all the same.
Records are written in file order, files in the order given. Standard library only,
apart from pyarrow for parquet.
"""
import argparse
import json
import os
import sys

MAX_REPORTED = 20  # bad records listed one by one; the rest are counted


class Converter:
    def __init__(self, out, field, strip, skip_bad):
        self.out = out
        self.field = field
        self.strip = strip
        self.skip_bad = skip_bad
        self.written = 0
        self.bad = 0

    def report(self, path, index, problem):
        self.bad += 1
        if self.bad <= MAX_REPORTED:
            print(f"to_jsonl: {path}:{index}: {problem}", file=sys.stderr)
        elif self.bad == MAX_REPORTED + 1:
            print("to_jsonl: (further bad records are counted, not listed)", file=sys.stderr)

    def emit(self, path, index, value):
        """Writes one document; value is what the record holds in FIELD."""
        if not isinstance(value, str):
            self.report(path, index, f'"{self.field}" is {json_kind(value)}, not a string')
            return
        if self.strip:
            value = value.strip()
        try:
            line = json.dumps({"text": value}, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate from a \ud800 escape
            self.report(path, index, f'"{self.field}" is not valid Unicode ({e.reason})')
            return
        self.out.write(line)
        self.out.write(b"\n")
        self.written += 1

    def record(self, path, index, obj):
        if not isinstance(obj, dict):
            self.report(path, index, f"{json_kind(obj)}, not an object")
        elif self.field not in obj:
            self.report(path, index, f'no "{self.field}" field (fields: {", ".join(sorted(obj)[:8])})')
        else:
            self.emit(path, index, obj[self.field])

    def json_file(self, path):
        with open(path, "rb") as f:
            try:
                data = json.loads(f.read().decode("utf-8"))
            except UnicodeDecodeError as e:
                raise InputError(f"{path}: not UTF-8 ({e})")
            except json.JSONDecodeError as e:
                raise InputError(f"{path}: invalid JSON: {e.msg} at line {e.lineno} column {e.colno}")
        if not isinstance(data, list):
            raise InputError(f"{path}: expected a JSON array of objects, found a {type(data).__name__}")
        for i, obj in enumerate(data):
            self.record(path, i, obj)

    def jsonl_file(self, path):
        with open(path, "rb") as f:
            for lineno, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                try:
                    obj = json.loads(raw.decode("utf-8"))
                except UnicodeDecodeError:
                    self.report(path, lineno, "the line is not UTF-8")
                    continue
                except json.JSONDecodeError as e:
                    self.report(path, lineno, f"invalid JSON: {e.msg} at column {e.colno}")
                    continue
                self.record(path, lineno, obj)

    def parquet_file(self, path):
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise InputError(f"{path}: reading parquet needs pyarrow: python3 -m pip install pyarrow")
        try:
            pf = pq.ParquetFile(path)
        except Exception as e:  # pyarrow raises several kinds for a bad file
            raise InputError(f"{path}: not a readable parquet file: {e}")
        names = pf.schema_arrow.names
        if self.field not in names:
            raise InputError(f'{path}: no "{self.field}" column (columns: {", ".join(names)})')
        row = 0
        try:
            for batch in pf.iter_batches(batch_size=8192, columns=[self.field]):
                for value in batch.column(0).to_pylist():
                    self.emit(path, row, value)
                    row += 1
        except InputError:
            raise
        except Exception as e:
            raise InputError(f"{path}: read error at row {row}: {e}")


def json_kind(v):
    if v is None:
        return "null"
    for t, name in ((bool, "a boolean"), (int, "a number"), (float, "a number"), (str, "a string"),
                    (list, "an array"), (dict, "an object")):
        if isinstance(v, t):
            return name
    return "a " + type(v).__name__


class InputError(Exception):
    pass


def detect_format(path, forced):
    if forced != "auto":
        return forced
    for ext, fmt in ((".jsonl", "jsonl"), (".json", "json"), (".parquet", "parquet")):
        if path.endswith(ext):
            return fmt
    raise InputError(f"{path}: cannot tell the format from the name (.json, .jsonl or .parquet); give --format")


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="to_jsonl.py",
        description=__doc__.split("\n\n")[0].split(": ", 1)[1],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", metavar="FILE", help="input files, converted in this order")
    ap.add_argument("--field", default="text",
                    help='the field (or parquet column) with the document text: "story" for TinyStories, '
                         '"text" for FineWeb (default text)')
    ap.add_argument("--format", default="auto", choices=["auto", "json", "jsonl", "parquet"],
                    help="input format (default: from each file name)")
    ap.add_argument("-o", "--output", default="-",
                    help="output file, written atomically (FILE.tmp, then renamed); - = stdout (default)")
    ap.add_argument("--strip", action="store_true",
                    help="strip white space at both ends of every text (as llama2.c's TinyStories script does)")
    ap.add_argument("--skip-bad", action="store_true", help="drop bad records (still reported) instead of failing")
    args = ap.parse_args(argv)

    tmp = None
    if args.output == "-":
        out = sys.stdout.buffer
    else:
        tmp = args.output + ".tmp"
        out = open(tmp, "wb", buffering=1 << 20)
    conv = Converter(out, args.field, args.strip, args.skip_bad)
    ok = False
    try:
        for path in args.inputs:
            if not os.path.isfile(path):
                raise InputError(f"{path}: no such file")
            fmt = detect_format(path, args.format)
            getattr(conv, fmt + "_file")(path)
        ok = conv.bad == 0 or args.skip_bad
    except InputError as e:
        print(f"to_jsonl: error: {e}", file=sys.stderr)
    except OSError as e:
        print(f"to_jsonl: error: {e}", file=sys.stderr)
    finally:
        if tmp is not None:
            out.close()
            if ok:
                os.replace(tmp, args.output)
            else:
                os.unlink(tmp)
        else:
            out.flush()
    where = "stdout" if tmp is None else args.output
    if conv.bad and not ok:
        what = "the output on stdout is incomplete" if tmp is None else f"{args.output} not written"
        print(f"to_jsonl: error: {conv.bad} bad record(s), {what} (--skip-bad drops them)", file=sys.stderr)
    elif ok:
        extra = f", {conv.bad} bad record(s) dropped" if conv.bad else ""
        print(f"to_jsonl: {conv.written} documents from {len(args.inputs)} file(s) -> {where}{extra}",
              file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
