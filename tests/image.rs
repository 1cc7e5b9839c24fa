//! plegd's image as deploy/image/image.sh makes it: an OCI image index of amd64 and arm64, each
//! image the binary and Debian's C libraries on nothing else, run as the non-root user 65532 with
//! no file that raises privileges; the same inputs make the same digests; the arm64 image's own
//! files run plegd under qemu-user (`--version`, and `watch` reporting a container's death from a
//! fake CRI); the SBOM names every crate plegd is built from and each image's Debian packages.
//!
//! The arm64 binary is `$PLEGD_ARM64_BINARY` (tests/run.sh cross-builds it with
//! `deploy/image/image.sh cross-binary`); without it these tests say so and pass, unless
//! `PLEGD_REQUIRE_IMAGE=1` (tests/run.sh sets it).

use plegd_test_support as support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use support::fake_cri::FakeServer;

const PLEGD: &str = env!("CARGO_BIN_EXE_plegd");
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/image/image.sh");

/// The arm64 binary, or None after a loud message where it was not built.
fn arm64_binary() -> Option<String> {
    match std::env::var("PLEGD_ARM64_BINARY") {
        Ok(binary) if !binary.is_empty() => Some(binary),
        _ if std::env::var("PLEGD_REQUIRE_IMAGE").is_ok_and(|v| v == "1") => {
            panic!("PLEGD_REQUIRE_IMAGE=1 but PLEGD_ARM64_BINARY is not set (deploy/image/image.sh cross-binary)")
        }
        _ => {
            eprintln!(
                "!!! SKIPPED: PLEGD_ARM64_BINARY is not set (bash deploy/image/image.sh cross-binary builds it) !!!"
            );
            None
        }
    }
}

fn script(args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(SCRIPT)
        .args(args)
        .output()
        .expect("run image.sh");
    assert!(
        out.status.success(),
        "image.sh {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// `image.sh assemble` of both architectures into `out`; the image index's digest.
fn assemble(out: &Path, arm64: &str, sbom: Option<&Path>) -> String {
    assemble_from(out, PLEGD, arm64, sbom)
}

/// [`assemble`] with `amd64` as the amd64 binary.
fn assemble_from(out: &Path, amd64: &str, arm64: &str, sbom: Option<&Path>) -> String {
    let out = out.to_str().unwrap();
    let amd64 = format!("amd64={amd64}");
    let arm64 = format!("arm64={arm64}");
    let mut args = vec!["assemble", "--out", out, "--name", "plegd.test/plegd:image"];
    if let Some(sbom) = sbom {
        args.extend(["--sbom", sbom.to_str().unwrap()]);
    }
    args.extend([amd64.as_str(), arm64.as_str()]);
    script(&args)
}

/// An OCI image layout, each blob checked against its digest and size as it is read.
struct Layout(PathBuf);

impl Layout {
    fn blob(&self, descriptor: &Value) -> Vec<u8> {
        let digest = descriptor["digest"].as_str().expect("a digest");
        let hex = digest.strip_prefix("sha256:").expect("sha256");
        let bytes = std::fs::read(self.0.join("blobs/sha256").join(hex)).expect("the blob");
        assert_eq!(
            bytes.len() as u64,
            descriptor["size"].as_u64().unwrap(),
            "{digest}: size"
        );
        assert_eq!(sha256(&bytes), hex, "{digest}: content");
        bytes
    }

    fn json(&self, descriptor: &Value) -> Value {
        serde_json::from_slice(&self.blob(descriptor)).expect("a JSON blob")
    }

    /// The image index's manifests by platform ("linux/amd64", "linux/arm64/v8").
    fn manifests(&self) -> BTreeMap<String, Value> {
        let top: Value = serde_json::from_slice(&std::fs::read(self.0.join("index.json")).unwrap()).unwrap();
        assert_eq!(top["manifests"].as_array().unwrap().len(), 1, "{top}");
        let named = &top["manifests"][0];
        assert_eq!(named["mediaType"], "application/vnd.oci.image.index.v1+json");
        assert_eq!(
            named["annotations"]["io.containerd.image.name"],
            "plegd.test/plegd:image"
        );
        let index = self.json(named);
        index["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                let p = &m["platform"];
                let variant = p["variant"].as_str().map(|v| format!("/{v}")).unwrap_or_default();
                (
                    format!(
                        "{}/{}{variant}",
                        p["os"].as_str().unwrap(),
                        p["architecture"].as_str().unwrap()
                    ),
                    self.json(m),
                )
            })
            .collect()
    }

    /// The one layer of a manifest, as (path, mode, uid, gid, kind, link target, bytes).
    fn files(&self, manifest: &Value) -> Vec<Entry> {
        let layers = manifest["layers"].as_array().unwrap();
        assert_eq!(layers.len(), 1, "one layer: {manifest}");
        let gz = self.blob(&layers[0]);
        let tar = gunzip(&gz);
        let mut entries = Vec::new();
        let mut archive = tar_entries(&tar);
        while let Some(entry) = archive.next_entry() {
            entries.push(entry);
        }
        entries
    }
}

/// `command args` with `input` on its stdin: its stdout.
fn piped(command: &str, args: &[&str], input: &[u8]) -> Vec<u8> {
    let mut child = Command::new(command)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{command}: {e}"));
    let mut stdin = child.stdin.take().unwrap();
    let data = input.to_vec();
    let writer = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, &data));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "{command} {args:?}");
    out.stdout
}

fn sha256(bytes: &[u8]) -> String {
    String::from_utf8(piped("sha256sum", &[], bytes)).unwrap()[..64].to_owned()
}

fn gunzip(gz: &[u8]) -> Vec<u8> {
    piped("gzip", &["-dc"], gz)
}

#[derive(Debug)]
struct Entry {
    path: String,
    mode: u32,
    uid: u64,
    gid: u64,
    kind: u8,
    link: String,
    data: Vec<u8>,
}

/// A reader of ustar/pax archives: enough for the layers oci.py writes (pax headers for long
/// names are applied to the entry after them).
struct TarEntries<'a> {
    tar: &'a [u8],
    at: usize,
}

fn tar_entries(tar: &[u8]) -> TarEntries<'_> {
    TarEntries { tar, at: 0 }
}

impl TarEntries<'_> {
    fn next_entry(&mut self) -> Option<Entry> {
        let mut pax: BTreeMap<String, String> = BTreeMap::new();
        loop {
            let header = self.tar.get(self.at..self.at + 512)?;
            if header.iter().all(|b| *b == 0) {
                return None;
            }
            let text = |from: usize, len: usize| {
                let field = &header[from..from + len];
                let end = field.iter().position(|b| *b == 0).unwrap_or(len);
                String::from_utf8_lossy(&field[..end]).trim().to_owned()
            };
            let octal = |from: usize, len: usize| u64::from_str_radix(&text(from, len), 8).unwrap_or(0);
            let size = octal(124, 12) as usize;
            let kind = header[156];
            let data = self.tar[self.at + 512..self.at + 512 + size].to_vec();
            self.at += 512 + size.div_ceil(512) * 512;
            if kind == b'x' {
                let mut rest = data.as_slice();
                while !rest.is_empty() {
                    let space = rest.iter().position(|b| *b == b' ').unwrap();
                    let len: usize = std::str::from_utf8(&rest[..space]).unwrap().parse().unwrap();
                    let record = std::str::from_utf8(&rest[space + 1..len - 1]).unwrap();
                    let (k, v) = record.split_once('=').unwrap();
                    pax.insert(k.to_owned(), v.to_owned());
                    rest = &rest[len..];
                }
                continue;
            }
            let prefix = text(345, 155);
            let name = text(0, 100);
            let path = pax.remove("path").unwrap_or(if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            });
            return Some(Entry {
                path: format!("/{}", path.trim_end_matches('/')),
                mode: octal(100, 8) as u32,
                uid: octal(108, 8),
                gid: octal(116, 8),
                kind,
                link: pax.remove("linkpath").unwrap_or(text(157, 100)),
                data,
            });
        }
    }
}

#[test]
fn the_image_is_an_index_of_amd64_and_arm64_that_runs_as_non_root() {
    let Some(arm64) = arm64_binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    // Both builds from one copy of this build's plegd: deploy/demo.sh (tests/demo.rs, which may
    // run meanwhile) builds the workspace's binaries again at the same path.
    let binaries = tempfile::tempdir().unwrap();
    let amd64 = binaries.path().join("plegd");
    std::fs::copy(PLEGD, &amd64).unwrap();
    let amd64 = amd64.to_str().unwrap();
    let digest = assemble_from(dir.path(), amd64, &arm64, None);
    assert!(digest.starts_with("sha256:"), "{digest}");
    let layout = Layout(dir.path().join("layout"));
    let manifests = layout.manifests();
    assert_eq!(
        manifests.keys().collect::<Vec<_>>(),
        ["linux/amd64", "linux/arm64/v8"],
        "the index's platforms"
    );
    for (platform, manifest) in &manifests {
        let config = layout.json(&manifest["config"]);
        assert_eq!(config["config"]["User"], "65532:65532", "{platform}");
        assert_eq!(
            config["config"]["Entrypoint"],
            serde_json::json!(["/usr/local/bin/plegd"]),
            "{platform}"
        );
        assert_eq!(config["config"]["Cmd"], serde_json::json!(["run"]), "{platform}");
        assert_eq!(
            config["config"]["Labels"]["org.opencontainers.image.licenses"], "Apache-2.0",
            "{platform}"
        );
        let files = layout.files(manifest);
        let by_path: BTreeMap<&str, &Entry> = files.iter().map(|e| (e.path.as_str(), e)).collect();
        // Root's files but for plegd's own directories; nothing setuid, setgid or world-writable
        // but /tmp (sticky).
        for e in &files {
            let own = ["/run/plegd", "/home/nonroot"].contains(&e.path.as_str());
            assert_eq!(
                (e.uid, e.gid),
                if own { (65532, 65532) } else { (0, 0) },
                "{platform} {}",
                e.path
            );
            assert_eq!(e.mode & 0o6000, 0, "{platform} {}: setuid or setgid", e.path);
            if e.kind != b'2' && e.path != "/tmp" {
                assert_eq!(e.mode & 0o002, 0, "{platform} {}: world-writable", e.path);
            }
        }
        assert_eq!(by_path["/tmp"].mode, 0o1777, "{platform}");
        let passwd = String::from_utf8_lossy(&by_path["/etc/passwd"].data).into_owned();
        assert!(passwd.contains("nonroot:x:65532:65532:"), "{platform}: {passwd}");
        assert_eq!(by_path["/usr/local/bin/plegd"].mode, 0o755);
        // Nothing but plegd, its accounts and the C libraries it links.
        let regular: BTreeSet<&str> = files
            .iter()
            .filter(|e| e.kind == b'0')
            .map(|e| e.path.as_str())
            .collect();
        let triplet = if platform.contains("amd64") {
            "x86_64-linux-gnu"
        } else {
            "aarch64-linux-gnu"
        };
        let allowed: BTreeSet<String> = [
            "/etc/passwd",
            "/etc/group",
            "/etc/nsswitch.conf",
            "/usr/local/bin/plegd",
        ]
        .map(String::from)
        .into_iter()
        .chain(["libc.so.6", "libm.so.6", "libgcc_s.so.1"].map(|l| format!("/lib/{triplet}/{l}")))
        .chain([format!(
            "/lib/{triplet}/{}",
            if triplet.starts_with("x86") {
                "ld-linux-x86-64.so.2"
            } else {
                "ld-linux-aarch64.so.1"
            }
        )])
        .collect();
        for path in &regular {
            assert!(allowed.contains(*path), "{platform}: {path} in the image");
        }
        assert!(
            regular.contains(format!("/lib/{triplet}/libc.so.6").as_str()),
            "{platform}: {regular:?}"
        );
    }
    // The same inputs, the same digest: a rebuild can be checked against a published image.
    let again = tempfile::tempdir().unwrap();
    assert_eq!(
        assemble_from(again.path(), amd64, &arm64, None),
        digest,
        "the index's digest, built twice"
    );
}

/// The arm64 image's files: plegd, run by qemu-user with the image's own C libraries.
fn arm64_root(layout: &Layout, into: &Path) {
    let manifests = layout.manifests();
    for e in layout.files(&manifests["linux/arm64/v8"]) {
        let at = into.join(e.path.trim_start_matches('/'));
        match e.kind {
            b'5' => std::fs::create_dir_all(&at).unwrap(),
            b'2' => std::os::unix::fs::symlink(&e.link, &at).unwrap(),
            _ => {
                std::fs::write(&at, &e.data).unwrap();
                std::fs::set_permissions(&at, std::os::unix::fs::PermissionsExt::from_mode(e.mode)).unwrap();
            }
        }
    }
}

fn qemu() -> &'static str {
    let qemu = "qemu-aarch64";
    assert!(
        Command::new(qemu)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "qemu-aarch64 runs the arm64 image here (Debian: apt-get install qemu-user)"
    );
    qemu
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_arm64_image_runs_plegd_under_qemu() {
    let Some(arm64) = arm64_binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    assemble(dir.path(), &arm64, None);
    let root = dir.path().join("root");
    arm64_root(&Layout(dir.path().join("layout")), &root);
    let plegd = root.join("usr/local/bin/plegd");
    // -L: the image's own interpreter and libraries, not the machine's.
    let version = Command::new(qemu())
        .arg("-L")
        .arg(&root)
        .arg(&plegd)
        .arg("--version")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&version.stdout);
    assert!(
        version.status.success() && text.trim() == format!("plegd {}", env!("CARGO_PKG_VERSION")),
        "{text} {}",
        String::from_utf8_lossy(&version.stderr)
    );

    // `plegd watch` on arm64 against a fake CRI: a container's start, then its death.
    let server = FakeServer::start().await;
    server.fake.add_running_pod("u1", "web", 1);
    let mut watch = tokio::process::Command::new(qemu())
        .arg("-L")
        .arg(&root)
        .arg(&plegd)
        .args([
            "watch",
            "--cri-socket",
            server.path.to_str().unwrap(),
            "--relist-period",
            "100ms",
        ])
        .args(["--output", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(watch.stdout.take().unwrap()));
    let mut next_event = async |what: &str, matches: &dyn Fn(&Value) -> bool| loop {
        let line = tokio::time::timeout(Duration::from_secs(120), lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("the arm64 plegd's {what} within 120 s"))
            .unwrap()
            .unwrap_or_else(|| panic!("the arm64 plegd ended before its {what}"));
        let event: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON: {line}: {e}"));
        if matches(&event) {
            return event;
        }
    };
    next_event("ContainerStarted of ctr-u1-0", &|e| {
        e["type"] == "ContainerStarted" && e["container_id"] == "ctr-u1-0"
    })
    .await;
    server.fake.exit_container("ctr-u1-0", 4);
    let died = next_event("ContainerDied", &|e| e["type"] == "ContainerDied").await;
    assert_eq!(
        (&died["container_id"], &died["exit_code"]),
        (&"ctr-u1-0".into(), &4.into()),
        "{died}"
    );
    watch.kill().await.unwrap();
}

#[test]
fn the_sbom_names_every_crate_and_package_in_the_image() {
    let Some(arm64) = arm64_binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let crates = dir.path().join("crates.cdx.json");
    script(&["sbom", crates.to_str().unwrap()]);
    let digest = assemble(dir.path(), &arm64, Some(&crates));
    let sbom: Value = serde_json::from_slice(&std::fs::read(dir.path().join("plegd.cdx.json")).unwrap()).unwrap();
    assert_eq!(sbom["bomFormat"], "CycloneDX");
    let properties = sbom["metadata"]["properties"].as_array().unwrap();
    assert!(
        properties
            .iter()
            .any(|p| p["name"] == "plegd:image-index-digest" && p["value"] == digest.as_str()),
        "the SBOM names the image it describes: {properties:?}"
    );
    let components = sbom["components"].as_array().unwrap();
    let purls: BTreeSet<&str> = components.iter().filter_map(|c| c["purl"].as_str()).collect();
    // Every crate the binary is built from (normal dependencies, for either architecture).
    let mut missing = Vec::new();
    for target in ["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"] {
        let tree = Command::new(env!("CARGO"))
            .args([
                "tree", "--locked", "-p", "plegd", "-e", "normal", "--prefix", "none", "--format", "{p}",
            ])
            .args(["--target", target])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap();
        assert!(tree.status.success(), "{}", String::from_utf8_lossy(&tree.stderr));
        for line in String::from_utf8(tree.stdout).unwrap().lines() {
            let mut words = line.split_whitespace();
            let (Some(name), Some(version)) = (words.next(), words.next()) else {
                continue;
            };
            if name == "plegd" {
                continue;
            }
            let purl = format!("pkg:cargo/{name}@{}", version.trim_start_matches('v'));
            if !purls.iter().any(|p| p.starts_with(&purl)) {
                missing.push(purl);
            }
        }
    }
    missing.sort();
    missing.dedup();
    assert!(missing.is_empty(), "crates missing from the SBOM: {missing:?}");
    // Every crate with its license and Cargo.lock's checksum.
    for c in components
        .iter()
        .filter(|c| c["purl"].as_str().is_some_and(|p| p.starts_with("pkg:cargo/")))
    {
        assert!(
            c["licenses"].as_array().is_some_and(|l| !l.is_empty()),
            "no license: {c}"
        );
        assert!(
            c["hashes"]
                .as_array()
                .is_some_and(|h| h.iter().any(|h| h["alg"] == "SHA-256")),
            "no checksum: {c}"
        );
    }
    // Each image's Debian packages, with the .deb's digest.
    for arch in ["amd64", "arm64"] {
        for package in ["libc6", "libgcc-s1"] {
            let c = components
                .iter()
                .find(|c| {
                    c["purl"].as_str().is_some_and(|p| {
                        p.starts_with(&format!("pkg:deb/debian/{package}@")) && p.contains(&format!("arch={arch}"))
                    })
                })
                .unwrap_or_else(|| panic!("{package} ({arch}) missing from the SBOM"));
            assert_eq!(c["hashes"][0]["content"].as_str().unwrap().len(), 64, "{c}");
        }
    }
}

#[test]
fn wrong_arguments_are_refused_with_a_message() {
    for (args, says) in [
        (&["assemble", "--out", "/tmp/x"][..], "name at least one ARCH=BINARY"),
        (
            &["assemble", "--out", "/tmp/x", "riscv64=/bin/true"][..],
            "ARCH must be amd64 or arm64",
        ),
        (
            &["assemble", "--out", "/tmp/x", "amd64=/nonexistent"][..],
            "/nonexistent is not an executable",
        ),
        (&["assemble", "amd64=/bin/true"][..], "--out DIR is required"),
        (&["build", "--fast"][..], "unknown argument '--fast'"),
        (&["frobnicate"][..], "usage:"),
    ] {
        let out = Command::new("bash").arg(SCRIPT).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// A name without a registry is stored as containerd and the kubelet name it (`plegd:dev` is
/// `docker.io/library/plegd:dev`): else a pod of image `plegd:dev` finds no image and pulls.
#[test]
fn a_name_without_a_registry_is_docker_hubs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    script(&[
        "assemble",
        "--out",
        out,
        "--name",
        "plegd:dev",
        &format!("amd64={PLEGD}"),
    ]);
    let top: Value = serde_json::from_slice(&std::fs::read(dir.path().join("layout/index.json")).unwrap()).unwrap();
    let annotations = &top["manifests"][0]["annotations"];
    assert_eq!(
        annotations["io.containerd.image.name"], "docker.io/library/plegd:dev",
        "{top}"
    );
    assert_eq!(annotations["org.opencontainers.image.ref.name"], "dev", "{top}");
}

/// Several image.sh at once on an empty cache (the tests assemble images in parallel on a new
/// machine) fetch Debian's libraries once: the others wait for it and find the same root, where
/// without the lock they raced apt on the same directory and failed.
#[test]
fn images_assembled_at_once_fetch_the_base_once() {
    let cache = tempfile::tempdir().unwrap();
    let runs: Vec<_> = (0..3)
        .map(|_| {
            Command::new("bash")
                .arg(SCRIPT)
                .args(["base", "amd64"])
                .env("PLEGD_IMAGE_CACHE", cache.path())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("run image.sh base amd64")
        })
        .collect();
    let mut roots = BTreeSet::new();
    let mut fetches = 0;
    for run in runs {
        let out = run.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "image.sh base amd64 failed: {stderr}");
        fetches += stderr.matches("fetching Debian 12's libc6").count();
        roots.insert(String::from_utf8(out.stdout).unwrap().trim().to_owned());
    }
    assert_eq!(fetches, 1, "the base fetched {fetches} times");
    let root = roots.pop_first().unwrap();
    assert!(
        roots.is_empty() && Path::new(&root).join("packages.json").is_file(),
        "{root}"
    );
}
