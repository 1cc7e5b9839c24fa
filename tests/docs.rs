//! The docs cannot drift from the code: every flag of every command (`--help`), every metric plegd
//! exports and every file under src/ is named in docs/ (the README points there), the versions the
//! docs name are those the code and the test scripts run, and README stays short enough to read in
//! five minutes.

use clap::CommandFactory;
use plegd_test_support::manifests::{files_under, path};

/// Every page of docs/, as one text.
fn docs() -> String {
    let mut text = String::new();
    for entry in std::fs::read_dir(path("docs")).expect("docs/").flatten() {
        if entry.path().extension().is_some_and(|e| e == "md") {
            text.push_str(&std::fs::read_to_string(entry.path()).unwrap());
            text.push('\n');
        }
    }
    assert!(text.len() > 10_000, "docs/ is nearly empty");
    text
}

/// Every long flag of `command` and its subcommands (clap's own `--help` and `--version` aside),
/// with the command that has it.
fn flags(command: &clap::Command, under: &str, out: &mut Vec<(String, String)>) {
    let name = format!("{under} {}", command.get_name()).trim().to_owned();
    for arg in command.get_arguments() {
        if let Some(long) = arg.get_long()
            && !["help", "version"].contains(&long)
        {
            out.push((name.clone(), format!("--{long}")));
        }
    }
    for sub in command.get_subcommands() {
        flags(sub, &name, out);
    }
}

#[test]
fn every_flag_is_in_the_docs() {
    let docs = docs();
    let mut all = Vec::new();
    flags(&plegd::cli::args::Cli::command(), "", &mut all);
    assert!(all.len() > 40, "{all:?}");
    let missing: Vec<_> = all
        .iter()
        .filter(|(_, flag)| {
            // Named as a flag: followed by a space, `=`, a backquote or the end of a word.
            !docs.match_indices(flag.as_str()).any(|(at, _)| {
                docs[at + flag.len()..]
                    .chars()
                    .next()
                    .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '-'))
            })
        })
        .collect();
    assert!(missing.is_empty(), "flags docs/ does not name: {missing:?}");
}

#[test]
fn every_metric_is_in_the_docs() {
    let docs = docs();
    let exported = plegd::metrics::Metrics::new().encode();
    let mut names = Vec::new();
    for line in exported.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let (Some(name), Some(kind)) = (words.next(), words.next()) else {
            continue;
        };
        // A counter is named as its series are, with `_total`.
        let name = if kind == "counter" && !name.ends_with("_total") {
            format!("{name}_total")
        } else {
            name.to_owned()
        };
        names.push(name);
    }
    assert!(names.len() > 30, "{exported}");
    let missing: Vec<_> = names.iter().filter(|n| !docs.contains(&format!("`{n}`"))).collect();
    assert!(missing.is_empty(), "metrics docs/ does not name: {missing:?}");
}

#[test]
fn every_source_file_is_in_the_docs() {
    let docs = docs();
    let root = std::path::PathBuf::from(path(""));
    let files: Vec<String> = files_under(&["src"])
        .iter()
        .map(|p| p.strip_prefix(&root).unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(files.len() > 50, "{files:?}");
    let missing: Vec<_> = files.iter().filter(|f| !docs.contains(f.as_str())).collect();
    assert!(missing.is_empty(), "files of src/ docs/ does not name: {missing:?}");
    // The map of the code names each file where it lives.
    let map = std::fs::read_to_string(path("docs/architecture.md")).unwrap();
    let unmapped: Vec<_> = files.iter().filter(|f| !map.contains(&format!("`{f}`"))).collect();
    assert!(
        unmapped.is_empty(),
        "files of src/ docs/architecture.md's map does not name: {unmapped:?}"
    );
}

#[test]
fn the_readme_is_short_and_sends_readers_to_the_docs() {
    let readme = std::fs::read_to_string(path("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(lines <= 200, "README.md is {lines} lines");
    for page in [
        "docs/operating.md",
        "docs/architecture.md",
        "docs/testing.md",
        "docs/kubernetes-versions.md",
        "SECURITY.md",
        "RELIABILITY.md",
        "BENCHMARKS.md",
    ] {
        assert!(readme.contains(&format!("]({page}")), "README links no {page}");
        assert!(std::path::Path::new(&path(page)).exists(), "{page} is not there");
    }
    // The two commands, near the top.
    let head: String = readme.lines().take(70).collect::<Vec<_>>().join("\n");
    for command in ["    bash deploy/demo.sh", "    bash tests/run.sh"] {
        assert!(head.contains(command), "README's first 70 lines lack {command:?}");
    }
    let ci = std::fs::read_to_string(path(".ci/run")).unwrap();
    assert!(ci.contains("bash tests/run.sh"), ".ci/run runs another command");
}

/// Every link of README and docs/ to a file of the repository, and to a section of a page of it,
/// leads somewhere (GitHub's anchors: lower case, spaces to `-`, punctuation dropped).
#[test]
fn the_docs_links_lead_somewhere() {
    let mut pages = vec![path("README.md")];
    for entry in std::fs::read_dir(path("docs")).unwrap().flatten() {
        pages.push(entry.path().to_string_lossy().into_owned());
    }
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        let dir = std::path::Path::new(page).parent().unwrap();
        for (at, _) in text.match_indices("](") {
            let rest = &text[at + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = &rest[..end];
            if target.starts_with("http") || target.contains(' ') {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
            let file = if file.is_empty() {
                std::path::PathBuf::from(page)
            } else {
                dir.join(file)
            };
            if !file.exists() {
                broken.push(format!("{page}: {target}"));
                continue;
            }
            if !anchor.is_empty() && file.extension().is_some_and(|e| e == "md") {
                let anchors = anchors(&std::fs::read_to_string(&file).unwrap());
                if !anchors.iter().any(|a| a == anchor) {
                    broken.push(format!("{page}: {target}"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "links that lead nowhere: {broken:?}");
}

/// The anchors GitHub gives a page's headings (a repeated one gets `-1`, `-2`, …).
fn anchors(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let heading = line.trim_start_matches('#').trim();
        let slug: String = heading
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let times = seen.entry(slug.clone()).or_default();
        out.push(if *times == 0 { slug } else { format!("{slug}-{times}") });
        *times += 1;
    }
    out
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(path(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// The value a script gives `NAME` by default (`NAME=${ENV:-VALUE}` or `NAME=VALUE`).
fn script_default(script: &str, name: &str) -> String {
    let text = read(script);
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{name}=")))
        .unwrap_or_else(|| panic!("{script} sets no {name}"));
    let value = line.split_once('=').unwrap().1;
    let value = value
        .strip_prefix("${")
        .and_then(|v| v.split_once(":-"))
        .map_or(value, |(_, v)| v.trim_end_matches('}'));
    value.trim_matches('"').to_owned()
}

/// Every `v1_NN` (a k8s-openapi version feature) the text names.
fn openapi_features(text: &str) -> std::collections::BTreeSet<String> {
    text.match_indices("v1_")
        .filter_map(|(at, _)| {
            let digits: String = text[at + 3..].chars().take_while(char::is_ascii_digit).collect();
            (!digits.is_empty()).then(|| format!("v1_{digits}"))
        })
        .collect()
}

/// The versions the docs name are the code's and the test scripts': the Kubernetes API plegd is
/// built against, the kubelet minors whose status it generates and the kubelets the cluster runs,
/// the containerd, CRI-O and Helm releases the tests build. A version changed in one place and not
/// the other fails here.
#[test]
fn the_versions_the_docs_name_are_the_ones_the_code_runs() {
    let versions_doc = read("docs/kubernetes-versions.md");
    let operating = read("docs/operating.md");
    let testing = read("docs/testing.md");

    // The k8s-openapi feature: the one Cargo.toml turns on, and no other.
    let cargo = read("Cargo.toml");
    let k8s_openapi = cargo
        .lines()
        .find(|l| l.starts_with("k8s-openapi"))
        .expect("k8s-openapi in Cargo.toml");
    let feature = openapi_features(k8s_openapi);
    assert_eq!(feature.len(), 1, "{k8s_openapi}");
    for (doc, text) in [
        ("docs/kubernetes-versions.md", &versions_doc),
        ("docs/operating.md", &operating),
    ] {
        assert_eq!(
            openapi_features(text),
            feature,
            "{doc} names another k8s-openapi feature than Cargo.toml's"
        );
    }

    // The kubelet minors: the generator's, the cluster's kubelets, the docs' table and CI's list.
    let minors: Vec<&str> = plegd::status::generate::KubeletMinor::ALL.map(|m| m.as_str()).to_vec();
    let header = format!("| switch | {} |", minors.join(" | "));
    assert!(
        operating.contains(&header),
        "docs/operating.md's switch table is not headed {header}"
    );
    let control_plane = script_default("tests/cluster/cluster.sh", "K8S_VERSION");
    let cluster = read("tests/cluster/cluster.sh");
    let kubelets: Vec<String> = cluster
        .lines()
        .find_map(|l| l.strip_prefix("KUBELET_VERSIONS=("))
        .expect("tests/cluster/cluster.sh's KUBELET_VERSIONS")
        .trim_end_matches(')')
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let kubelet_minors: Vec<String> = kubelets
        .iter()
        .map(|v| v.rsplit_once('.').unwrap().0.to_owned())
        .collect();
    assert_eq!(
        kubelet_minors, minors,
        "the cluster's kubelets are one per minor plegd generates"
    );
    assert_eq!(
        kubelets.last(),
        Some(&control_plane),
        "the newest kubelet is the control plane's"
    );
    for version in kubelets.iter().chain([&control_plane]) {
        assert!(
            versions_doc.contains(&format!("v{version}")),
            "docs/kubernetes-versions.md does not name v{version}"
        );
    }
    let ci = read("tests/run.sh");
    let older = kubelets[..kubelets.len() - 1].join(" ");
    assert!(
        ci.contains(&format!("PLEGD_KUBELET_VERSIONS-{older}}}")),
        "tests/run.sh does not run the older kubelets {older} by default"
    );

    // containerd, CRI-O and Helm as the scripts build them.
    let containerd = read("tests/containerd/containerd.sh");
    let releases = containerd
        .lines()
        .find_map(|l| l.strip_prefix("declare -A RELEASES=("))
        .expect("tests/containerd/containerd.sh's RELEASES");
    for release in releases.trim_end_matches(')').split_whitespace() {
        let version = release.split_once('=').expect("[minor]=version").1;
        assert!(
            versions_doc.contains(&format!("**{version}**")),
            "docs/kubernetes-versions.md does not name containerd {version}"
        );
    }
    let crio = script_default("tests/crio/crio.sh", "VERSION");
    assert!(
        versions_doc.contains(&format!("**CRI-O {}**", crio.trim_start_matches('v'))),
        "CRI-O {crio}"
    );
    let helm = script_default("tests/helm/helm.sh", "VERSION");
    assert!(testing.contains(&helm), "docs/testing.md does not name Helm {helm}");
    let helm3 = read("tests/helm/helm.sh")
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("v3.")
                .and_then(|v| v.split_once(')'))
                .map(|(v, _)| format!("v3.{v}"))
        })
        .expect("the Helm 3 release tests/helm/helm.sh builds");
    assert!(testing.contains(&helm3), "docs/testing.md does not name Helm {helm3}");
}
