"""
Description: the static libraries export only their API (libmanners.a: the
manners_* of manners.h; libgraybox.a: gbp_* and gb_*), as their shared twins
do: a program with a function of the same name as one of their internals
(proc_read_small, multiplex_join, ...) links against them and runs.  Before
the archives were sealed (Makefile, sealed_archive) such a program failed to
link: "multiple definition of `proc_read_small'".
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("DISCNICE_BUILD") or REPO / "build")

# Each host program defines internal names of the library it links, and
# calls one API function, whose answer it prints.
HOSTS = {
    "libmanners.a": ("discnice/manners.h", ["proc_read_small", "multiplex_join",
                                            "machine_activity_read", "library_warn"],
                     'char v[16]; manners_config_get("alpha", v, sizeof v); puts(v);', "0.05"),
    "libgraybox.a": ("discnice/gbp.h", ["proc_read_small", "private_fd_move"],
                     'puts(gbp_backend_name(0));', "auto"),
}


def _api(archive: Path):
    """The global symbols an archive defines."""
    out = subprocess.run(["nm", "--defined-only", "-g", str(archive)], capture_output=True,
                         text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if len(line.split()) == 3}


@pytest.mark.parametrize("name", sorted(HOSTS))
def test_static_library_exports_only_its_api(name, tmp_path):
    archive = BUILD / name
    if not archive.exists():
        pytest.fail(f"{archive} not built (run `make all`)", pytrace=False)
    prefixes = ("manners_",) if name == "libmanners.a" else ("gbp_", "gb_")
    assert all(s.startswith(prefixes) for s in _api(archive)), sorted(_api(archive))
    header, internals, call, expected = HOSTS[name]
    src = tmp_path / "host.c"
    src.write_text(
        "#include <stdio.h>\n"
        f"#include <{header}>\n"
        + "".join(f"int {f}(void);\nint {f}(void) {{ return 7; }}\n" for f in internals)
        + "int main(void)\n{\n\t" + call + "\n\treturn "
        + " + ".join(f"{f}()" for f in internals) + " == " + str(7 * len(internals))
        + " ? 0 : 1;\n}\n")
    exe = tmp_path / "host"
    r = subprocess.run(["cc", "-I", str(REPO / "include"), "-o", str(exe), str(src), str(archive),
                        "-pthread", "-lm", "-ldl"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout.strip() == expected, (r.returncode, r.stdout, r.stderr)
