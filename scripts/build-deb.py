#!/usr/bin/env python3
"""Builds a crate's .deb from its `[package.metadata.deb]` (cargo-deb's format), without cargo-deb.

    scripts/build-deb.py --release-dir DIR --output DIR MANIFEST...

MANIFEST is a crate's Cargo.toml (hook/Cargo.toml, mps-daemon/Cargo.toml). An asset
`target/release/NAME` is taken from --release-dir (the release build's binaries, e.g.
target/x86_64-unknown-linux-gnu/release); other asset paths are relative to the crate's directory.
The package is what `cargo deb --no-build --no-strip` made of the same metadata, without having to
compile cargo-deb on every cold CI run (minutes on 2 cores): the same control fields (Version
gets cargo-deb's default revision `-1`), files, modes (root:root), maintainer scripts, conffiles
(every asset under etc/, as cargo-deb marks them, plus `conf-files`) and
usr/share/doc/PACKAGE/copyright, owner 0/0), plus md5sums, which dpkg --verify reads. The archive
is written here (deb(5): ar of debian-binary, control.tar.xz, data.tar.xz) and read back with
dpkg-deb --info/--contents. Keys this script does not know are an error, so that a key added for
cargo-deb is never silently dropped.

Files are dated SOURCE_DATE_EPOCH (default: the last commit's time), so a rebuild of the same tree
gives the same package.
"""

import argparse
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import tomllib
from pathlib import Path

# Control fields passed through as written (cargo-deb's key -> Debian field).
RELATIONS = {
    "depends": "Depends",
    "pre-depends": "Pre-Depends",
    "recommends": "Recommends",
    "suggests": "Suggests",
    "enhances": "Enhances",
    "conflicts": "Conflicts",
    "breaks": "Breaks",
    "replaces": "Replaces",
    "provides": "Provides",
}
KNOWN = {
    "maintainer",
    "copyright",
    "section",
    "priority",
    "extended-description",
    "maintainer-scripts",
    "assets",
    "conf-files",
    "revision",
    *RELATIONS,
}
SCRIPTS = ("preinst", "postinst", "prerm", "postrm", "config", "templates", "triggers")
ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


def fail(msg):
    print(f"build-deb: {msg}", file=sys.stderr)
    sys.exit(1)


def load(manifest):
    """The crate's [package] table with workspace-inherited keys resolved, and its deb metadata."""
    with open(manifest, "rb") as f:
        pkg = tomllib.load(f)["package"]
    root = Path(__file__).resolve().parent.parent
    with open(root / "Cargo.toml", "rb") as f:
        ws = tomllib.load(f)["workspace"].get("package", {})
    for key, value in list(pkg.items()):
        if isinstance(value, dict) and value.get("workspace") is True:
            pkg[key] = ws[key]
    meta = pkg.get("metadata", {}).get("deb")
    if meta is None:
        fail(f"{manifest}: no [package.metadata.deb]")
    unknown = set(meta) - KNOWN
    if unknown:
        fail(f"{manifest}: [package.metadata.deb] key(s) {sorted(unknown)} not handled by "
             "scripts/build-deb.py: add them there")
    return pkg, meta


def description(pkg, meta):
    """Synopsis on the Description line, the extended description folded as Debian wants it."""
    lines = [pkg["description"]]
    for para in meta.get("extended-description", "").strip().split("\n\n"):
        if lines[1:]:
            lines.append(".")
        lines += textwrap.wrap(" ".join(para.split()), width=79) or ["."]
    return "\n ".join(lines)


def stage_assets(meta, crate_dir, release_dir, root):
    """Copies the assets into root with their modes; returns their package paths."""
    placed = []
    for src, dest, mode in meta.get("assets", []):
        if src.startswith("target/release/"):
            path = release_dir / src[len("target/release/"):]
        else:
            path = crate_dir / src
        if not path.is_file():
            fail(f"asset {src}: {path} is not a file (run the release build first)")
        if dest.endswith("/"):
            dest += path.name
        out = root / dest.lstrip("/")
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, out)
        out.chmod(int(mode, 8))
        placed.append("/" + dest.lstrip("/"))
    return placed


def installed_size(root):
    """KiB, as dpkg-gencontrol counts it: each file rounded up, each directory one."""
    total = 0
    for dirpath, dirs, files in os.walk(root):
        total += len(dirs)
        total += sum((os.lstat(Path(dirpath) / f).st_size + 1023) // 1024 for f in files)
    return total


def tar_xz(top, epoch, skip=None):
    """top's tree as an xz tar: ./-relative names, sorted, owner 0/0 without names (as cargo-deb
    writes it; dpkg-deb --root-owner-group would write root/root), dated epoch."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz", format=tarfile.GNU_FORMAT) as tar:
        for path in sorted(p for p in top.rglob("*") if skip is None or skip not in (p, *p.parents)):
            info = tar.gettarinfo(str(path), "./" + str(path.relative_to(top)))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = epoch
            info.mode = 0o755 if path.is_dir() else path.stat().st_mode & 0o777
            if path.is_file():
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return buf.getvalue()


def write_deb(deb, root, epoch):
    """The ar archive dpkg reads: debian-binary, control.tar.xz, data.tar.xz (deb(5))."""
    members = [("debian-binary", b"2.0\n"),
               ("control.tar.xz", tar_xz(root / "DEBIAN", epoch)),
               ("data.tar.xz", tar_xz(root, epoch, skip=root / "DEBIAN"))]
    with open(deb, "wb") as out:
        out.write(b"!<arch>\n")
        for name, data in members:
            header = f"{name:<16}{epoch:<12}{0:<6}{0:<6}{0o100644:<8o}{len(data):<10}`\n"
            out.write(header.encode("ascii"))
            out.write(data + (b"\n" if len(data) % 2 else b""))


def write_control(root, control, pkg, meta, version, arch, placed, crate_dir):
    """DEBIAN/: control, md5sums, conffiles and the maintainer scripts."""
    name = pkg["name"]
    md5 = []
    for f in sorted(p for p in root.rglob("*") if p.is_file() and control not in p.parents):
        digest = hashlib.md5(f.read_bytes()).hexdigest()
        md5.append(f"{digest}  {f.relative_to(root)}\n")
    size = installed_size(root) - 1  # DEBIAN/ is not installed
    fields = [("Package", name), ("Version", version), ("Architecture", arch),
              ("Section", meta.get("section")), ("Priority", meta.get("priority")),
              ("Maintainer", meta["maintainer"]), ("Installed-Size", str(size))]
    fields += [(field, meta.get(key)) for key, field in RELATIONS.items()]
    fields.append(("Description", description(pkg, meta)))
    (control / "control").write_text(
        "".join(f"{k}: {v}\n" for k, v in fields if v))
    (control / "md5sums").write_text("".join(md5))
    conf = [p for p in placed if p.startswith("/etc/")] + meta.get("conf-files", [])
    if conf:
        (control / "conffiles").write_text("".join(f"{c}\n" for c in dict.fromkeys(conf)))
    if "maintainer-scripts" in meta:
        scripts = crate_dir / meta["maintainer-scripts"]
        for s in SCRIPTS:
            if (scripts / s).is_file():
                shutil.copyfile(scripts / s, control / s)
                (control / s).chmod(0o644 if s in ("templates", "triggers") else 0o755)


def build(manifest, release_dir, output, epoch):
    pkg, meta = load(manifest)
    name, crate_dir = pkg["name"], Path(manifest).resolve().parent
    version = f"{pkg['version']}-{meta.get('revision', '1')}"
    arch = ARCH[os.uname().machine]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        control = root / "DEBIAN"
        control.mkdir(parents=True)
        placed = stage_assets(meta, crate_dir, release_dir, root)
        doc = root / "usr/share/doc" / name
        doc.mkdir(parents=True, exist_ok=True)
        (doc / "copyright").write_text(
            "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
            f"Upstream-Name: {name}\nCopyright: {meta['copyright']}\nLicense: {pkg['license']}\n")
        (doc / "copyright").chmod(0o644)
        write_control(root, control, pkg, meta, version, arch, placed, crate_dir)
        deb = output / f"{name}_{version}_{arch}.deb"
        write_deb(deb, root, epoch)
        # dpkg reads it back: a malformed archive or control file fails here, not on a node.
        subprocess.run(["dpkg-deb", "--info", str(deb)], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["dpkg-deb", "--contents", str(deb)], check=True,
                       stdout=subprocess.DEVNULL)
        print(deb)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--release-dir", type=Path, required=True)
    ap.add_argument("--output", type=Path, required=True)
    ap.add_argument("manifests", nargs="+")
    args = ap.parse_args()
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if not epoch:
        git = subprocess.run(["git", "log", "-1", "--format=%ct"], capture_output=True, text=True)
        epoch = git.stdout.strip() or "0"
    args.output.mkdir(parents=True, exist_ok=True)
    os.umask(0o022)
    for m in args.manifests:
        build(m, args.release_dir, args.output, int(epoch))


if __name__ == "__main__":
    main()
