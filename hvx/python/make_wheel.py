#!/usr/bin/env python3
"""Writes hvx's wheel: make_wheel.py [--requires=SPEC] OUT.whl VERSION TAG ROOT FILE...

SPEC is its torch requirement (default "torch"): the exact torch the native module was built
against. FILEs are the package's files (hvx/...), each at its path relative to ROOT or, for generated
ones, given as SRC=DEST. The wheel is CPython-TAG-specific (its extension module is) and linux_x86_64;
its dist-info holds METADATA, WHEEL and RECORD (sha256 of every file), as pip expects."""
import base64
import hashlib
import os
import sys
import zipfile


def main(argv):
    requires = "torch"
    args = argv[1:]
    if args and args[0].startswith("--requires="):
        requires = args.pop(0)[len("--requires="):]
    out, version, tag, root = args[:4]
    files = []
    for spec in args[4:]:
        src, _, dest = spec.partition("=")
        if not dest:
            dest = os.path.relpath(src, root)
        files.append((src, dest))
    info = "hvx-%s.dist-info" % version
    metadata = "\n".join([
        "Metadata-Version: 2.1", "Name: hvx", "Version: " + version,
        "Summary: Distributed training over MPI: horovod.torch's API on hvx's C++ engine",
        "Requires-Python: >=3.11", "Requires-Dist: " + requires, "",
        "Needs Debian's libmpich12, libabsl and libprotobuf at run time (hvx's tools/setup "
        "installs them), and the torch it requires. Launch with hvxrun.", ""])
    wheel = "\n".join(["Wheel-Version: 1.0", "Generator: hvx make_wheel.py",
                       "Root-Is-Purelib: false", "Tag: %s-%s-linux_x86_64" % (tag, tag), ""])
    record = []
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        def add(name, data):
            info_ = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info_.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            info_.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info_, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append("%s,sha256=%s,%d" % (name, digest.decode(), len(data)))
        for src, dest in sorted(files, key=lambda f: f[1]):
            with open(src, "rb") as f:
                add(dest, f.read())
        add(info + "/METADATA", metadata.encode())
        add(info + "/WHEEL", wheel.encode())
        record.append(info + "/RECORD,,")
        z.writestr(zipfile.ZipInfo(info + "/RECORD", date_time=(2020, 1, 1, 0, 0, 0)),
                   "\n".join(record) + "\n")


if __name__ == "__main__":
    main(sys.argv)
