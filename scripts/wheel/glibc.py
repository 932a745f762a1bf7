"""Is a wheel's platform tag true to its binary? Exits 1 if not.

    glibc.py WHEEL...            each wheel's bridge against the wheel's own tag
    glibc.py --floor 2.17 BIN    one binary against a floor

For each binary: the newest GLIBC_x.y version it needs (its .gnu.version_r
entries, the versions the dynamic loader checks at start) must be no newer
than the tag's manylinux_X_Y floor, every library it needs (DT_NEEDED) must be
one that manylinux lets a wheel take from the system, and its ELF machine must
be the tag's architecture. Prints what it measured.
"""

import argparse
import io
import re
import sys
import zipfile

from elftools.elf.elffile import ELFFile

MACHINES = {"EM_X86_64": "x86_64", "EM_AARCH64": "aarch64"}
# The system libraries of PEP 599's list that a command-line binary may use.
SYSTEM_LIBS = {"libc.so.6", "libdl.so.2", "libpthread.so.0", "libresolv.so.2", "libm.so.6", "librt.so.1",
               "libutil.so.1", "libnsl.so.1", "libgcc_s.so.1", "libstdc++.so.6"}


def version(s):
    """2.3.3 -> (2, 3, 3); a name such as GLIBC_2.3.3 sorts by its numbers."""
    return tuple(int(p) for p in re.findall(r"\d+", s))


def needs(data):
    """(architecture, needed libraries, {library: sorted versions}) of an ELF binary."""
    elf = ELFFile(io.BytesIO(data))
    out = {}
    sec = elf.get_section_by_name(".gnu.version_r")
    if sec is not None:
        for verneed, auxes in sec.iter_versions():
            out[verneed.name] = sorted({a.name for a in auxes})
    dyn = elf.get_section_by_name(".dynamic")
    needed = [t.needed for t in dyn.iter_tags("DT_NEEDED")] if dyn is not None else []
    return MACHINES.get(elf["e_machine"], elf["e_machine"]), needed, out


def newest_glibc(libs):
    vs = [v[len("GLIBC_"):] for names in libs.values() for v in names if re.match(r"^GLIBC_[0-9.]+$", v)]
    return max(vs, key=version) if vs else None


def check(label, data, floor, arch):
    got_arch, needed, libs = needs(data)
    newest = newest_glibc(libs)
    foreign = [n for n in needed if n not in SYSTEM_LIBS]
    ok = (newest is None or version(newest) <= version(floor)) and not foreign
    if arch is not None and got_arch != arch:
        ok = False
    print("%s: %s, needs GLIBC_%s at most; floor %s%s: %s" % (
        label, got_arch, newest, floor, "" if arch is None else " for " + arch, "ok" if ok else "FAIL"))
    print("  needed: %s%s" % (" ".join(needed), "; not a system library: " + " ".join(foreign) if foreign else ""))
    for lib in sorted(libs):
        print("  %s: %s" % (lib, " ".join(sorted(libs[lib], key=version))))
    return ok


def check_wheel(path):
    m = re.search(r"-py3-none-manylinux_(\d+)_(\d+)_(x86_64|aarch64)[.-]", path.rsplit("/", 1)[-1] + "-")
    if not m:
        print("%s: no manylinux_X_Y_ARCH tag in the file name: FAIL" % path)
        return False
    floor, arch = "%s.%s" % (m.group(1), m.group(2)), m.group(3)
    with zipfile.ZipFile(path) as z:
        bins = [n for n in z.namelist() if re.match(r"^[^/]+\.data/scripts/bridge$", n)]
        if len(bins) != 1:
            print("%s: expected one .data/scripts/bridge, found %s: FAIL" % (path, bins))
            return False
        return check(path + ":" + bins[0], z.read(bins[0]), floor, arch)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--floor", help="check binaries against this glibc version instead of wheels' tags")
    p.add_argument("paths", nargs="+")
    a = p.parse_args()
    ok = True
    for path in a.paths:
        if a.floor:
            with open(path, "rb") as f:
                ok = check(path, f.read(), a.floor, None) and ok
        else:
            ok = check_wheel(path) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
