#!/usr/bin/env python3
"""checksum_files.py - an example background job regulated by libmanners
through its Python binding: prints the SHA-256 of every regular file under a
directory, reporting two progress metrics at each testpoint - bytes read and
files finished (MS Manners §4.4) - so it backs off when the machine is
wanted by something more important.

    python3 checksum_files.py DIR
"""
import hashlib
import os
import sys

import discnice_manners as manners

BYTES, FILES = 0, 1
CHUNK = 1 << 20


def main(top: str) -> int:
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
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: checksum_files.py DIR", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
