#!/usr/bin/env python3
"""The SageMaker image's Dockerfile against what its programs need, without Docker (its base image
cannot be pulled here): every shared library that hvx-train, hvx_info, hvxrun, hvxrun_rank, mpiexec,
hydra's proxy, sshd and ssh load, and every program the kit runs (mpiexec, hydra_pmi_proxy, sshd,
ssh, ssh-keygen, python3), comes from a Debian package that the Dockerfile's `apt-get install`
brings in (with what those packages depend on) or that debian:12 itself has (the required and
essential ones). A library the build starts to link, or a package Debian renames, fails here
instead of on the instance. Libraries are resolved by this machine's loader, so this holds for an
image of the same Debian release as the machine that built the programs (the Dockerfile says so).

    dockerfile_test.py DOCKERFILE PROGRAM...

Needs dpkg and apt-cache (Debian); without them, or for programs built against a LibTorch that no
Debian package has (HVX_TORCH_PYTHON), it prints SKIPPED and passes.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys

failures = 0


def check(what, ok):
    global failures
    print(("ok: " if ok else "FAIL: ") + what)
    failures += 0 if ok else 1


def run(*argv):
    return subprocess.run(argv, capture_output=True, text=True).stdout


def installed_packages(dockerfile):
    """The package names of every `apt-get install` in the Dockerfile's RUN lines."""
    with open(dockerfile, encoding="utf-8") as f:
        text = f.read().replace("\\\n", " ")
    packages = []
    for line in text.splitlines():
        if not line.startswith("RUN "):
            continue
        for command in re.split(r"&&|;|\|\|", line[4:]):
            words = shlex.split(command)
            if words[:2] == ["apt-get", "install"]:
                packages += [w for w in words[2:] if not w.startswith("-")]
    return packages


def image_packages(wanted):
    """Those packages, what they depend on (recursively; recommends and suggests are not
    installed), and the packages debian:12 has before any RUN: the required and essential ones."""
    have = set()
    out = run("apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
              "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances", *wanted)
    for line in out.splitlines():
        if line and not line.startswith((" ", "<")):
            have.add(line.split(":")[0])
    out = run("dpkg-query", "-W", "-f", "${Package} ${Priority} ${Essential}\n")
    for line in out.splitlines():
        name, priority, essential = (line.split() + ["", "", ""])[:3]
        if priority == "required" or essential == "yes":
            have.add(name)
    return have


def variants(path):
    """The names dpkg may know a file by: Debian 12 merges /lib into /usr/lib, and a package may
    own either spelling."""
    real = os.path.realpath(path)
    names = {path, real}
    for p in (path, real):
        if p.startswith("/usr/"):
            names.add(p[4:])
        else:
            names.add("/usr" + p)
    return names


def owners(paths):
    """{path: package} for every path dpkg knows (any of its spellings), in one dpkg call."""
    spelled = {}
    for p in paths:
        for v in variants(p):
            spelled.setdefault(v, set()).add(p)
    out = run("dpkg", "-S", *sorted(spelled))
    found = {}
    for line in out.splitlines():
        if ": " not in line:
            continue
        packages, path = line.split(": ", 1)
        for original in spelled.get(path.strip(), ()):
            found.setdefault(original, packages.split(",")[0].strip().split(":")[0])
    return found


def libraries(program):
    """The shared libraries the loader resolves for `program` ([] when statically linked), and
    those it cannot find."""
    done = subprocess.run(["ldd", program], capture_output=True, text=True)
    if done.returncode != 0:
        return [], []
    found, missing = [], []
    for line in done.stdout.splitlines():
        m = re.match(r"\s*(\S+) => (\S+)", line)
        if m and m.group(2) == "not":
            missing.append(m.group(1))
        elif m and m.group(2).startswith("/"):
            found.append(m.group(2))
    return found, missing


def main(argv):
    for tool in ("dpkg", "dpkg-query", "apt-cache", "ldd"):
        if shutil.which(tool) is None:
            print(f"SKIPPED: {tool} is not installed (a Debian system)")
            return 0
    dockerfile, programs = argv[1], [os.path.abspath(p) for p in argv[2:]]
    # The image is the default build's, on Debian's LibTorch (libtorch1.13 in the Dockerfile); a
    # build against another LibTorch (HVX_TORCH_PYTHON: PyPI's torch) is not what it packages.
    torch_libs = [lib for program in programs for lib in libraries(program)[0]
                  if os.path.basename(lib).startswith("libtorch")]
    foreign = sorted(set(torch_libs) - set(owners(torch_libs)))
    if foreign:
        print(f"SKIPPED: the programs link a LibTorch that no Debian package has ({foreign[0]}); "
              "the Dockerfile packages the default build, on Debian's libtorch1.13")
        return 0
    wanted = installed_packages(dockerfile)
    check(f"the Dockerfile installs: {' '.join(wanted)}", bool(wanted))
    unknown = [p for p in wanted if not run("apt-cache", "show", "--no-all-versions", p).strip()]
    check(f"Debian has every one of them{': not ' + ', '.join(unknown) if unknown else ''}",
          not unknown)
    have = image_packages(wanted)

    system = "/usr/sbin:/usr/bin:/sbin:/bin"
    tools = {}
    for tool in ("mpiexec", "hydra_pmi_proxy", "sshd", "ssh", "ssh-keygen", "python3"):
        path = shutil.which(tool, path=system)
        check(f"{tool} is installed here, to compare", path is not None)
        if path:
            tools[tool] = path
    owner = owners(tools.values())
    for tool, path in tools.items():
        package = owner.get(path)
        check(f"{tool} ({path}) comes with the image's package {package or '?'}",
              package in have)

    needed = {}
    for program in programs + list(tools.values()):
        libs, missing = libraries(program)
        name = os.path.basename(program)
        check(f"{name}: the loader finds every library it needs{': not ' + ', '.join(missing) if missing else ''}",
              not missing)
        for lib in libs:
            needed.setdefault(lib, []).append(name)
    owner = owners(needed)
    outside = [f"{lib} ({owner.get(lib, 'no package')}, for {', '.join(needed[lib])})"
               for lib in sorted(needed) if owner.get(lib) not in have]
    check(f"the {len(needed)} libraries they load come with the image's packages"
          f"{': not ' + '; '.join(outside) if outside else ''}", not outside)
    print(f"failures: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
