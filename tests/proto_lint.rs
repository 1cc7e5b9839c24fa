//! `proto/` passes `buf lint` with buf's standard rules (proto/buf.yaml): plegd's own API and the
//! slim CRI list messages alike. buf comes from the npm registry (`@bufbuild/buf`, pinned) and is
//! installed under cargo's test scratch directory the first time; `PLEGD_BUF` names another buf.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BUF_VERSION: &str = "1.75.0";

fn buf() -> PathBuf {
    if let Some(path) = std::env::var_os("PLEGD_BUF") {
        return path.into();
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("buf-{BUF_VERSION}"));
    let bin = dir.join("node_modules/.bin/buf");
    if !bin.exists() {
        let package = format!("@bufbuild/buf@{BUF_VERSION}");
        let out = Command::new("npm")
            .args(["install", "--no-save", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .arg(&package)
            .output()
            .unwrap_or_else(|e| panic!("npm is needed to install {package} (Debian: npm): {e}"));
        assert!(
            out.status.success(),
            "npm install {package} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    bin
}

fn lint(buf: &Path, dir: &Path) -> Output {
    Command::new(buf)
        .arg("lint")
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", buf.display()))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn proto_passes_buf_lint_with_the_standard_rules() {
    let buf = buf();
    let proto = Path::new(env!("CARGO_MANIFEST_DIR")).join("proto");
    let out = lint(&buf, &proto);
    assert!(out.status.success(), "buf lint proto/:\n{}", text(&out));

    // The check is live: the service name this API had before is refused.
    let copy = tempfile::tempdir().unwrap();
    for file in ["buf.yaml", "plegd/v1/events.proto", "runtime/v1/relist.proto"] {
        let to = copy.path().join(file);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(proto.join(file), &to).unwrap();
    }
    let events = copy.path().join("plegd/v1/events.proto");
    let renamed = std::fs::read_to_string(&events)
        .unwrap()
        .replace("service EventsService {", "service Events {");
    std::fs::write(&events, renamed).unwrap();
    let out = lint(&buf, copy.path());
    assert!(
        !out.status.success(),
        "buf lint accepted a service without the Service suffix"
    );
    assert!(
        text(&out).contains("should be suffixed with \"Service\""),
        "{}",
        text(&out)
    );
}
