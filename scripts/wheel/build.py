"""Writes bridge's platform wheel from a built binary (scripts/wheel.sh runs it).

    build.py --binary BIN --arch x86_64 --glibc 2.17 --out DIR

The wheel (PEP 427, 491) holds:
  <dist>-<ver>.data/scripts/bridge        the binary; pip puts it in the
                                          environment's bin/ (maturin's `bin` layout)
  bridge_system_metrics/                  the notebook call (python/)
  <dist>-<ver>.dist-info/METADATA, WHEEL, licenses/, RECORD

The bytes depend only on the inputs: entries in a fixed order, every time
stamp SOURCE_DATE_EPOCH, modes 0644/0755, one compression level. Only the
standard library is used, so nothing but Python decides the layout.
"""

import argparse
import base64
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPO_URL = "https://github.com/bridge-dev/bridge"

# The project's metadata, written once (the version is cmd/bridge/VERSION).
NAME = "bridge-system-metrics"
PACKAGE = "bridge_system_metrics"
SUMMARY = ("Scope-correct system metrics (container cgroup, node, GPUs) for training jobs, "
           "sent to MLflow or W&B: the bridge command and a one-call notebook attach")
LICENSE = "Apache-2.0"
REQUIRES_PYTHON = ">=3.8"
URLS = [
    ("Homepage", REPO_URL),
    ("Source", REPO_URL),
    ("Documentation", REPO_URL + "/blob/main/docs/wheel.md"),
    ("Issues", REPO_URL + "/issues"),
]
CLASSIFIERS = [
    "Environment :: Console",
    "Intended Audience :: Science/Research",
    "Operating System :: POSIX :: Linux",
    "Programming Language :: Go",
    "Programming Language :: Python :: 3",
    "Topic :: System :: Monitoring",
]

# PEP 440's canonical public form (N.N.N, then aN/bN/rcN, .postN, .devN).
VERSION_RE = re.compile(r"^\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?$")
# Legacy manylinux names of a glibc floor (PEP 600): pip before 20.3 knows only these.
LEGACY = {"2.17": "manylinux2014", "2.12": "manylinux2010", "2.5": "manylinux1"}


def platform_tags(glibc, arch):
    tags = ["manylinux_%s_%s" % (glibc.replace(".", "_"), arch)]
    if glibc in LEGACY:
        tags.append("%s_%s" % (LEGACY[glibc], arch))
    return tags


def readme():
    """README.md with its relative links made absolute: PyPI shows it alone."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()

    def absolute(m):
        bang, label, target = m.group(1), m.group(2), m.group(3)
        if re.match(r"^[a-z]+:|^#", target):
            return m.group(0)
        kind = "raw" if bang else "blob"
        return "%s[%s](%s/%s/main/%s)" % (bang, label, REPO_URL, kind, target)

    return re.sub(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)", absolute, text)


def third_party_licenses():
    """The license files of Go and of every module linked into the binary, as
    (name under licenses/, path). The binary carries their code."""
    goroot = subprocess.check_output(["go", "env", "GOROOT"], text=True).strip()
    out = [("third_party/go/" + n, os.path.join(goroot, n)) for n in ("LICENSE", "PATENTS")]
    listing = subprocess.check_output(
        ["go", "list", "-deps", "-f", "{{with .Module}}{{if not .Main}}{{.Path}} {{.Dir}}{{end}}{{end}}", "./cmd/bridge"],
        cwd=ROOT, text=True)
    for line in sorted(set(listing.split("\n")) - {""}):
        path, mdir = line.split(" ", 1)
        found = [n for n in sorted(os.listdir(mdir))
                 if re.match(r"^(LICEN[CS]E|COPYING|NOTICE|PATENTS)(\.(md|txt))?$", n, re.I)]
        if not found:
            sys.exit("build.py: module %s has no license file in %s" % (path, mdir))
        out += [("third_party/%s/%s" % (path, n), os.path.join(mdir, n)) for n in found]
    return out


def metadata(version, licenses):
    lines = [
        "Metadata-Version: 2.4",
        "Name: " + NAME,
        "Version: " + version,
        "Summary: " + SUMMARY,
        "License-Expression: " + LICENSE,
    ]
    lines += ["License-File: " + name for name in licenses]
    lines += ["Project-URL: %s, %s" % u for u in URLS]
    lines += ["Classifier: " + c for c in CLASSIFIERS]
    lines += ["Requires-Python: " + REQUIRES_PYTHON, "Description-Content-Type: text/markdown"]
    return "\n".join(lines) + "\n\n" + readme()


def digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def write_wheel(path, files, epoch):
    """files: (archive name, bytes, executable). RECORD is added last."""
    stamp = time.gmtime(max(epoch, 315532800))[:6]  # zip cannot say before 1980
    dist_info = files[-1][0].split("/")[0]
    record = io.StringIO()
    with zipfile.ZipFile(path, "w") as z:
        for name, data, executable in files:
            info = zipfile.ZipInfo(name, stamp)
            info.create_system = 3  # Unix, so that the mode below is read
            info.external_attr = (0o100755 if executable else 0o100644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data, compresslevel=9)
            record.write("%s,%s,%d\n" % (name, digest(data), len(data)))
        record.write("%s/RECORD,,\n" % dist_info)
        info = zipfile.ZipInfo(dist_info + "/RECORD", stamp)
        info.create_system = 3
        info.external_attr = 0o100644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        z.writestr(info, record.getvalue().encode(), compresslevel=9)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--binary", required=True)
    p.add_argument("--arch", required=True, choices=["x86_64", "aarch64"])
    p.add_argument("--glibc", required=True, help="the binary's glibc floor, e.g. 2.17")
    p.add_argument("--out", required=True)
    a = p.parse_args()

    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    if not epoch.isdigit():
        sys.exit("build.py: SOURCE_DATE_EPOCH=%r: set it to a Unix time (scripts/wheel.sh takes the commit's)" % epoch)
    with open(os.path.join(ROOT, "cmd/bridge/VERSION")) as f:
        version = f.read().strip()
    if not VERSION_RE.match(version):
        sys.exit("build.py: cmd/bridge/VERSION=%r is not a canonical PEP 440 version (e.g. 0.2.0, 0.2.0rc1, 0.2.0.dev0)" % version)

    stem = "%s-%s" % (PACKAGE, version)
    tags = platform_tags(a.glibc, a.arch)
    files = []
    pkg_dir = os.path.join(ROOT, "python", PACKAGE)
    for n in sorted(os.listdir(pkg_dir)):
        if n.endswith(".py"):
            with open(os.path.join(pkg_dir, n), "rb") as f:
                files.append(("%s/%s" % (PACKAGE, n), f.read(), False))
    with open(a.binary, "rb") as f:
        files.append((stem + ".data/scripts/bridge", f.read(), True))

    licenses = [("LICENSE", os.path.join(ROOT, "LICENSE"))] + third_party_licenses()
    info = stem + ".dist-info"
    for name, src in licenses:
        with open(src, "rb") as f:
            files.append(("%s/licenses/%s" % (info, name), f.read(), False))
    files.append((info + "/METADATA", metadata(version, [n for n, _ in licenses]).encode(), False))
    wheel = ["Wheel-Version: 1.0", "Generator: bridge scripts/wheel/build.py", "Root-Is-Purelib: false"]
    wheel += ["Tag: py3-none-" + t for t in tags]
    files.append((info + "/WHEEL", ("\n".join(wheel) + "\n").encode(), False))

    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "%s-py3-none-%s.whl" % (stem, ".".join(tags)))
    write_wheel(path, files, int(epoch))
    print(json.dumps({"wheel": path, "version": version, "tags": tags}))


if __name__ == "__main__":
    main()
