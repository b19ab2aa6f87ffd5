#!/usr/bin/env python3
"""hellaswag_like.py: writes a HellaSwag-like validation JSONL for the tests: N examples of
short sentences of common words, each with four endings and a random label, in
HellaSwag's fields ("ind", "ctx", "endings", "label"). The same seed gives the same file.

    python3 dev/test/hellaswag_like.py OUT.jsonl N SEED
"""
import json
import random
import sys

WORDS = ("the a man woman dog cat child farmer runs jumps sits over under near quickly slowly red blue "
         "green old house tree river road boat field window table chair sings reads cooks paints").split()


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.strip().splitlines()[-1].strip())
    out, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)

    def phrase(lo, hi):
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))

    with open(out, "w") as f:
        for i in range(n):
            ex = {"ind": i, "ctx": phrase(6, 14).capitalize() + ".",
                  "endings": [phrase(2, 7) + "." for _ in range(4)], "label": rng.randrange(4)}
            f.write(json.dumps(ex) + "\n")


if __name__ == "__main__":
    main()
