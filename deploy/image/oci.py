#!/usr/bin/env python3
"""plegd's image as an OCI image layout, without a container engine: one image per architecture,
each the plegd binary and the C libraries it links (from Debian's own packages of that
architecture) on nothing else, run as the non-root user 65532, and an image index over them.

    oci.py --out DIR --name NAME [--sbom SBOM.json] [--label KEY=VALUE]... ARCH=BINARY:BASE...

BASE is the unpacked Debian packages of ARCH (deploy/image/image.sh fetches them) and
BASE/packages.json names them (name, version, architecture, sha256 of the .deb). Writes DIR/layout
(the OCI image layout), DIR/plegd.oci.tar (the same as one archive, for `ctr images import`,
`skopeo copy oci-archive:...` or `docker load` of an engine that reads OCI archives) and, with
--sbom, DIR/plegd.cdx.json: the CycloneDX SBOM of plegd's crates with the image's Debian packages
added. Deterministic: the same inputs make the same digests (files dated SOURCE_DATE_EPOCH, 0 by
default).
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile

# The user plegd runs as: distroless' "nonroot", so that the image and deploy/Containerfile's agree.
UID = GID = 65532
# Debian's names of the architectures the image is built for, and their GNU triplets.
TRIPLETS = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}
INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


class ImageError(Exception):
    pass


def elf_needs(path):
    """The interpreter and the NEEDED libraries of the ELF file at path (readelf reads any
    architecture's)."""
    out = subprocess.run(["readelf", "-W", "-l", "-d", path], check=True, capture_output=True, text=True).stdout
    interpreter = None
    needed = []
    for line in out.splitlines():
        if "Requesting program interpreter:" in line:
            interpreter = line.split("interpreter:")[1].strip().rstrip("]")
        elif "(NEEDED)" in line:
            needed.append(line.split("[")[1].split("]")[0])
    return interpreter, needed


def library_files(binary, base, arch):
    """The paths (inside the image) of everything the binary needs from BASE to run: its
    interpreter and its libraries, theirs in turn, and the symbolic links that name them."""
    triplet = TRIPLETS[arch]
    search = [f"/lib/{triplet}", f"/usr/lib/{triplet}"]
    wanted = []
    todo = [binary]
    seen = set()
    while todo:
        interpreter, needed = elf_needs(todo.pop())
        names = ([interpreter] if interpreter else []) + [
            next((f"{d}/{n}" for d in search if os.path.lexists(base + f"{d}/{n}")), None) or n for n in needed
        ]
        for name in names:
            if not name.startswith("/"):
                raise ImageError(f"{binary} needs {name}, which no package of the {arch} base has")
            if name in seen:
                continue
            seen.add(name)
            # The link and whatever it names, followed inside BASE (an absolute link is BASE's).
            path = name
            while os.path.islink(base + path):
                wanted.append(path)
                target = os.readlink(base + path)
                path = os.path.normpath(target if target.startswith("/") else os.path.join(os.path.dirname(path), target))
            if not os.path.isfile(base + path):
                raise ImageError(f"{name} is not in the {arch} base at {base}")
            wanted.append(path)
            todo.append(base + path)
    return sorted(set(wanted))


def layer(binary, base, arch, epoch):
    """The image's one layer, as tar bytes: directories, the accounts, the libraries, plegd."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        added = set()

        def entry(path, kind, mode, uid=0, gid=0, data=b"", link=""):
            info = tarfile.TarInfo(path.lstrip("/"))
            info.type, info.mode, info.uid, info.gid, info.mtime = kind, mode, uid, gid, epoch
            info.uname = info.gname = ""
            info.linkname = link
            info.size = len(data) if kind == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
            added.add(path)

        def parents(path):
            parts = path.strip("/").split("/")[:-1]
            for i in range(1, len(parts) + 1):
                d = "/" + "/".join(parts[:i])
                if d not in added:
                    entry(d, tarfile.DIRTYPE, 0o755)

        for d, mode, owner in [("/etc", 0o755, 0), ("/tmp", 0o1777, 0), ("/run", 0o755, 0),
                               # The API socket's directory (--api-socket's default): plegd's own.
                               ("/run/plegd", 0o750, UID), ("/home/nonroot", 0o700, UID)]:
            parents(d)
            entry(d, tarfile.DIRTYPE, mode, owner, owner)
        entry("/etc/passwd", tarfile.REGTYPE, 0o644,
              data=b"root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")
        entry("/etc/group", tarfile.REGTYPE, 0o644, data=b"root:x:0:\nnonroot:x:65532:\n")
        entry("/etc/nsswitch.conf", tarfile.REGTYPE, 0o644, data=b"passwd: files\ngroup: files\nhosts: files dns\n")
        for path in library_files(binary, base, arch):
            parents(path)
            if os.path.islink(base + path):
                entry(path, tarfile.SYMTYPE, 0o777, link=os.readlink(base + path))
            else:
                with open(base + path, "rb") as f:
                    entry(path, tarfile.REGTYPE, 0o755 if os.access(base + path, os.X_OK) else 0o644, data=f.read())
        parents("/usr/local/bin/plegd")
        with open(binary, "rb") as f:
            entry("/usr/local/bin/plegd", tarfile.REGTYPE, 0o755, data=f.read())
    return buf.getvalue()


class Layout:
    def __init__(self, root):
        self.root = root
        os.makedirs(f"{root}/blobs/sha256", exist_ok=True)

    def blob(self, data, media_type, **extra):
        digest = hashlib.sha256(data).hexdigest()
        with open(f"{self.root}/blobs/sha256/{digest}", "wb") as f:
            f.write(data)
        return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data), **extra}

    def json_blob(self, value, media_type, **extra):
        return self.blob(json.dumps(value, separators=(",", ":"), sort_keys=True).encode(), media_type, **extra)


def image(layout, arch, binary, base, labels, epoch):
    tar = layer(binary, base, arch, epoch)
    layer_desc = layout.blob(gzip.compress(tar, compresslevel=6, mtime=0), LAYER)
    platform = {"architecture": arch, "os": "linux", **({"variant": "v8"} if arch == "arm64" else {})}
    config = {
        **platform,
        "config": {
            "User": f"{UID}:{GID}",
            "Entrypoint": ["/usr/local/bin/plegd"],
            "Cmd": ["run"],
            "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"],
            "WorkingDir": "/",
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(tar).hexdigest()}"]},
        "history": [{"created_by": "deploy/image/oci.py: plegd and its C libraries from Debian"}],
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": layout.json_blob(config, CONFIG),
        "layers": [layer_desc],
        "annotations": labels,
    }
    return layout.json_blob(manifest, MANIFEST, platform=platform)


def normalized(name):
    """NAME as containerd (and the kubelet, which asks for it so) stores it: a name without a
    registry is Docker Hub's, `plegd:dev` is `docker.io/library/plegd:dev`."""
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return name
    return f"docker.io/{name}" if rest else f"docker.io/library/{name}"


def sbom(cargo_sbom, bases, digest):
    """plegd's crates (cargo-cyclonedx's SBOM) and the Debian packages each image carries."""
    with open(cargo_sbom) as f:
        doc = json.load(f)
    components = doc.setdefault("components", [])
    for arch, packages in bases:
        for p in packages:
            purl = f"pkg:deb/debian/{p['name']}@{p['version']}?arch={arch}&distro=debian-12"
            components.append({
                "type": "library",
                "bom-ref": purl,
                "name": p["name"],
                "version": p["version"],
                "purl": purl,
                "hashes": [{"alg": "SHA-256", "content": p["sha256"]}],
                "properties": [{"name": "plegd:image-platform", "value": f"linux/{arch}"}],
            })
    meta = doc.setdefault("metadata", {})
    meta.setdefault("properties", []).append({"name": "plegd:image-index-digest", "value": digest})
    return doc


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--name", required=True, help="the image's name, e.g. plegd:dev")
    parser.add_argument("--sbom", help="cargo-cyclonedx's SBOM of plegd")
    parser.add_argument("--label", action="append", default=[], help="KEY=VALUE, an image label")
    parser.add_argument("images", nargs="+", metavar="ARCH=BINARY:BASE")
    args = parser.parse_args()
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    labels = dict(label.split("=", 1) for label in args.label)
    out = os.path.abspath(args.out)
    shutil.rmtree(f"{out}/layout", ignore_errors=True)
    layout = Layout(f"{out}/layout")
    manifests, bases = [], []
    for spec in args.images:
        arch, _, rest = spec.partition("=")
        binary, _, base = rest.partition(":")
        if arch not in TRIPLETS or not binary or not base:
            raise ImageError(f"{spec}: expected ARCH=BINARY:BASE with ARCH one of {', '.join(TRIPLETS)}")
        with open(f"{base}/packages.json") as f:
            bases.append((arch, json.load(f)))
        manifests.append(image(layout, arch, binary, base, labels, epoch))
    index = layout.json_blob({"schemaVersion": 2, "mediaType": INDEX, "manifests": manifests, "annotations": labels}, INDEX)
    index["annotations"] = {"io.containerd.image.name": normalized(args.name), "org.opencontainers.image.ref.name": args.name.rpartition(":")[2]}
    with open(f"{out}/layout/index.json", "w") as f:
        json.dump({"schemaVersion": 2, "mediaType": INDEX, "manifests": [index]}, f)
    with open(f"{out}/layout/oci-layout", "w") as f:
        f.write('{"imageLayoutVersion":"1.0.0"}')
    with tarfile.open(f"{out}/plegd.oci.tar.tmp", "w", format=tarfile.PAX_FORMAT) as tar:
        for root, dirs, files in os.walk(f"{out}/layout"):
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(root, name)
                info = tar.gettarinfo(path, os.path.relpath(path, f"{out}/layout"))
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mtime = epoch
                with open(path, "rb") as f:
                    tar.addfile(info, f)
    os.replace(f"{out}/plegd.oci.tar.tmp", f"{out}/plegd.oci.tar")
    if args.sbom:
        with open(f"{out}/plegd.cdx.json", "w") as f:
            json.dump(sbom(args.sbom, bases, index["digest"]), f, indent=2)
    print(index["digest"])


if __name__ == "__main__":
    try:
        main()
    except (ImageError, OSError, subprocess.CalledProcessError) as e:
        print(f"oci.py: error: {e}", file=sys.stderr)
        sys.exit(1)
