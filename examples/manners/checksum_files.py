#!/usr/bin/env python3
"""checksum_files.py - an example background job regulated by libmanners
through its Python binding: prints the SHA-256 of every regular file under a
directory, reporting two progress metrics at each testpoint - bytes read and
files finished (MS Manners §4.4) - so it backs off when the machine is
wanted by something more important.

    python3 checksum_files.py [--passes N] DIR

--passes N goes over DIR N times (0: for ever), as a long-running scrubber
does; bench/manners.py uses it as the instrumented job of §9.2.
"""
import hashlib
import os
import sys

import discnice_manners as manners

BYTES, FILES = 0, 1
CHUNK = 1 << 20


def main(top: str, passes: int = 1) -> int:
    done = 0
    while passes == 0 or done < passes:
        one_pass(top)
        done += 1
    return 0


def one_pass(top: str) -> None:
    for directory, _, names in os.walk(top):
        for name in sorted(names):
            path = os.path.join(directory, name)
            if not os.path.isfile(path) or os.path.islink(path):
                continue
            digest = hashlib.sha256()
            with open(path, "rb") as f:
                while chunk := f.read(CHUNK):
                    digest.update(chunk)
                    manners.testpoint(0, [len(chunk), 0])  # may block: that is the point
            manners.testpoint(0, [0, 1])
            print(f"{digest.hexdigest()}  {path}", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    passes = 1
    if len(args) == 3 and args[0] == "--passes" and args[1].isdigit():
        passes = int(args[1])
        args = args[2:]
    if len(args) != 1:
        print("usage: checksum_files.py [--passes N] DIR", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(args[0], passes))
