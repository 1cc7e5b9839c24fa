//! The modules of `src/` depend on each other without circles: following the data from the runtime
//! to the apiserver, a module only uses what comes before it or beside it, never something that
//! uses it back. Dependencies are read from the `crate::`, `super::` and `self::` paths of each
//! file's code (unit tests and comments left out). Checked at two levels: between the files (a
//! module and its own submodules excepted: a parent re-exporting its child is no circle) and
//! between the rooms of the flow, the top-level modules with everything inside them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module name (`pleg::events`; `crate` for lib.rs) → the file's code.
type Sources = BTreeMap<String, String>;

fn module_name(relative: &Path) -> String {
    let mut parts: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    if parts.is_empty() {
        "crate".to_owned()
    } else {
        parts.join("::")
    }
}

/// The code of a file: without comment lines and without its test code — every item under
/// `#[cfg(test)]` (a `mod tests`, a fixture, a helper, a test-only `use`), wherever it stands.
fn code(source: &str) -> String {
    let lines: Vec<&str> = source
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect();
    let chars: Vec<char> = lines.join("\n").chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        if let Some(after) = test_attribute_end(&chars, i) {
            i = item_end(&chars, after);
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

/// Past `#[cfg(test)]` (or `#[cfg(all(test, …))]`) when one starts at `at`.
fn test_attribute_end(chars: &[char], at: usize) -> Option<usize> {
    ["#[cfg(test)]", "#[cfg(all(test,"]
        .into_iter()
        .find(|attribute| code_at(chars, at, attribute))
        .map(|attribute| {
            let close = if attribute.ends_with(',') { "))]" } else { "" };
            let from = at + attribute.chars().count();
            (from..chars.len())
                .find(|&k| code_at(chars, k, close))
                .map_or(chars.len(), |k| k + close.len())
        })
}

/// Where the item that starts at `at` (its other attributes first) ends: past its `;` or its
/// closing brace, whichever closes it. Strings, raw strings, characters and line comments are read
/// as such, so that a brace inside one does not count.
fn item_end(chars: &[char], mut at: usize) -> usize {
    let (mut braces, mut brackets) = (0usize, 0usize);
    while at < chars.len() {
        match chars[at] {
            '"' => at = string_end(chars, at),
            'r' if (at == 0 || !is_ident(chars[at - 1])) && matches!(chars.get(at + 1), Some('"' | '#')) => {
                let hashes = chars[at + 1..].iter().take_while(|&&c| c == '#').count();
                if chars.get(at + 1 + hashes) == Some(&'"') {
                    let close: String = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
                    at = (at + 2 + hashes..chars.len())
                        .find(|&k| code_at(chars, k, &close))
                        .map_or(chars.len(), |k| k + close.len() - 1);
                }
            }
            '\'' => {
                // A character ('{', '\'', '\u{7d}'), or a lifetime ('a), which has no closing quote.
                if chars.get(at + 1) == Some(&'\\') {
                    at = (at + 3..chars.len()).find(|&k| chars[k] == '\'').unwrap_or(chars.len());
                } else if chars.get(at + 2) == Some(&'\'') {
                    at += 2;
                }
            }
            '/' if chars.get(at + 1) == Some(&'/') => {
                at = (at..chars.len()).find(|&k| chars[k] == '\n').unwrap_or(chars.len());
            }
            '(' | '[' => brackets += 1,
            ')' | ']' => brackets = brackets.saturating_sub(1),
            '{' => braces += 1,
            '}' => {
                braces = braces.saturating_sub(1);
                if braces == 0 && brackets == 0 {
                    return at + 1;
                }
            }
            ';' if braces == 0 && brackets == 0 => return at + 1,
            _ => {}
        }
        at += 1;
    }
    chars.len()
}

/// The index of the quote that closes the string opened at `open`.
fn string_end(chars: &[char], open: usize) -> usize {
    let mut at = open + 1;
    while at < chars.len() {
        match chars[at] {
            '\\' => at += 2,
            '"' => return at,
            _ => at += 1,
        }
    }
    chars.len()
}

/// The modules a file declares under `#[cfg(test)]` (`mod test_support;`): files of test code.
fn test_modules(source: &str) -> Vec<String> {
    let chars: Vec<char> = source.chars().collect();
    let mut found = Vec::new();
    for at in 0..chars.len() {
        let Some(after) = test_attribute_end(&chars, at) else {
            continue;
        };
        let item: String = chars[after..item_end(&chars, after)].iter().collect();
        let words: Vec<&str> = item.split(|c: char| !is_ident(c)).filter(|w| !w.is_empty()).collect();
        if let Some(name) = words.iter().position(|w| *w == "mod").and_then(|k| words.get(k + 1)) {
            found.push((*name).to_owned());
        }
    }
    found
}

/// Every module under `src/` with its code, test code left out: the unit tests beside the code
/// and the files of test code a module declares (`#[cfg(test)] mod test_support;`).
fn read_sources(src: &Path) -> Sources {
    let mut files = BTreeMap::new();
    read_files(src, src, &mut files);
    let test_only: Vec<String> = files
        .iter()
        .flat_map(|(name, source)| {
            test_modules(source).into_iter().map(move |child| match name.as_str() {
                "crate" => child,
                parent => format!("{parent}::{child}"),
            })
        })
        .collect();
    files
        .into_iter()
        .filter(|(name, _)| {
            !test_only
                .iter()
                .any(|t| name == t || name.starts_with(&format!("{t}::")))
        })
        .map(|(name, source)| (name, code(&source)))
        .collect()
}

/// Module name → the file's whole source.
fn read_files(dir: &Path, root: &Path, out: &mut BTreeMap<String, String>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            read_files(&path, root, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let name = module_name(path.strip_prefix(root).expect("under src"));
            out.insert(name, std::fs::read_to_string(&path).expect("read source"));
        }
    }
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Every path that starts at `crate`, `super` or `self`, brace groups expanded one level
/// (`crate::{a, b::c}` gives `crate::a` and `crate::b::c`).
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let starts_word = i == 0 || !is_ident(chars[i - 1]);
        let head = ["crate::", "super::", "self::"]
            .into_iter()
            .find(|h| starts_word && code_at(&chars, i, h));
        let Some(head) = head else {
            i += 1;
            continue;
        };
        let mut path = vec![head.trim_end_matches("::").to_owned()];
        let mut j = i + head.len();
        loop {
            if chars.get(j) == Some(&'{') {
                let end = chars[j..].iter().position(|&c| c == '}').map_or(chars.len(), |p| j + p);
                let group: String = chars[j + 1..end].iter().collect();
                for member in group.split(',') {
                    let mut p = path.clone();
                    p.extend(
                        member
                            .trim()
                            .split("::")
                            .map(|s| s.split_whitespace().next().unwrap_or_default().to_owned())
                            .filter(|s| !s.is_empty() && s.chars().all(is_ident)),
                    );
                    found.push(p);
                }
                j = end;
                break;
            }
            let start = j;
            while j < chars.len() && is_ident(chars[j]) {
                j += 1;
            }
            if j == start {
                break;
            }
            path.push(chars[start..j].iter().collect());
            if chars.get(j) == Some(&':') && chars.get(j + 1) == Some(&':') {
                j += 2;
            } else {
                found.push(path.clone());
                break;
            }
        }
        i = j.max(i + 1);
    }
    found
}

fn code_at(chars: &[char], at: usize, text: &str) -> bool {
    text.chars().enumerate().all(|(k, c)| chars.get(at + k) == Some(&c))
}

/// The module a path from module `from` names: the longest prefix of it that is a module.
fn resolve(from: &str, path: &[String], modules: &Sources) -> Option<String> {
    let mut base: Vec<String> = if from == "crate" {
        Vec::new()
    } else {
        from.split("::").map(str::to_owned).collect()
    };
    let mut segments = path.iter().peekable();
    match segments.next().map(String::as_str) {
        Some("crate") => base.clear(),
        Some("super") => {
            base.pop();
            while segments.peek().is_some_and(|s| *s == "super") {
                segments.next();
                base.pop();
            }
        }
        Some("self") => {}
        _ => return None,
    }
    base.extend(segments.cloned());
    (1..=base.len())
        .rev()
        .map(|k| base[..k].join("::"))
        .find(|name| modules.contains_key(name))
}

fn nested(a: &str, b: &str) -> bool {
    a.starts_with(&format!("{b}::")) || b.starts_with(&format!("{a}::"))
}

/// Module → the modules it uses, a module and those inside it counting as one.
fn graph(modules: &Sources) -> BTreeMap<String, BTreeSet<String>> {
    modules
        .iter()
        .map(|(name, code)| {
            let uses = paths(code)
                .iter()
                .filter_map(|p| resolve(name, p, modules))
                .filter(|target| target != name && target != "crate" && !nested(name, target))
                .collect();
            (name.clone(), uses)
        })
        .collect()
}

/// The same dependencies between top-level modules (`runtime::convert` counts as `runtime`).
fn rooms(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeMap<String, BTreeSet<String>> {
    let room = |name: &str| name.split("::").next().unwrap_or(name).to_owned();
    let mut rooms: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, uses) in graph {
        let from = room(name);
        let to: BTreeSet<String> = uses.iter().map(|u| room(u)).filter(|r| *r != from).collect();
        rooms.entry(from).or_default().extend(to);
    }
    rooms
}

/// One circle, if there is any, as the modules along it.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_owned());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn modules_depend_on_each_other_without_circles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = read_sources(&src);
    let uses = graph(&modules);
    // The reading works: the relister uses the runtime, status generation the runtime's view.
    assert!(uses["pleg"].contains("runtime"), "{:?}", uses["pleg"]);
    assert!(uses["status::generate"].contains("kubecontainer"));
    assert!(uses["runtime::lists"].contains("runtime::convert"));
    if let Some(found) = circle(&uses) {
        panic!("modules depend on each other in a circle: {}", found.join(" → "));
    }
    let plan = rooms(&uses);
    let arrows: usize = plan.values().map(BTreeSet::len).sum();
    eprintln!("{} rooms, {arrows} arrows between them:", plan.len());
    for (room, to) in &plan {
        eprintln!("  {room} → {}", to.iter().cloned().collect::<Vec<_>>().join(", "));
    }
    if let Some(found) = circle(&plan) {
        panic!(
            "top-level modules depend on each other in a circle: {}",
            found.join(" → ")
        );
    }
}

/// One rule of the layers docs/architecture.md states: no module of `from` (but those of
/// `from_except`) uses a module of `never` (but those of `but_may`). A pattern names a module and
/// everything inside it (`status` is `src/status/` whole); `status::mod` names `src/status/mod.rs`
/// alone, and `*` every module.
struct Layer {
    rule: &'static str,
    from: &'static [&'static str],
    from_except: &'static [&'static str],
    never: &'static [&'static str],
    but_may: &'static [&'static str],
}

/// The pure status modules: status generation and what decides, compares and patches.
const PURE_STATUS: &[&str] = &[
    "status::generate",
    "status::resources",
    "status::compare",
    "status::decide",
    "status::gate",
    "status::patch",
    "status::semantic",
];

/// The layers of docs/architecture.md ("Which room may use which"), in its words.
const LAYERS: &[Layer] = &[
    Layer {
        rule: "util is the ground floor: it uses no other room",
        from: &["util"],
        from_except: &[],
        never: &["*"],
        but_may: &["util"],
    },
    Layer {
        rule: "metrics uses only util",
        from: &["metrics"],
        from_except: &[],
        never: &["*"],
        but_may: &["metrics", "util"],
    },
    Layer {
        rule: "kubecontainer is plain data: it uses no stage",
        from: &["kubecontainer"],
        from_except: &[],
        never: &["*"],
        but_may: &["kubecontainer", "util", "metrics"],
    },
    Layer {
        rule: "the runtime client never uses what reads it (pleg, triggers)",
        from: &["runtime"],
        from_except: &[],
        never: &["pleg", "triggers"],
        but_may: &[],
    },
    Layer {
        rule: "the PLEG never uses its triggers",
        from: &["pleg"],
        from_except: &[],
        never: &["triggers"],
        but_may: &[],
    },
    Layer {
        rule: "the runtime side never uses the apiserver side",
        from: &["runtime", "kubecontainer", "pleg", "triggers"],
        from_except: &[],
        never: &["apiserver", "sync_loop", "status"],
        but_may: &[],
    },
    Layer {
        rule: "the apiserver side never uses the runtime side, nor the stages that use it",
        from: &["apiserver"],
        from_except: &[],
        never: &["runtime", "kubecontainer", "pleg", "triggers", "sync_loop", "status"],
        but_may: &[],
    },
    Layer {
        rule: "status generation is pure: it uses only the runtime's and the apiserver's plain data",
        from: PURE_STATUS,
        from_except: &[],
        never: &["*"],
        but_may: &[
            "status::generate",
            "status::resources",
            "status::compare",
            "status::decide",
            "status::gate",
            "status::patch",
            "status::semantic",
            "status::mod",
            "kubecontainer::mod",
            "apiserver::pod",
            "util::clock",
        ],
    },
    Layer {
        rule: "the status stage reads the runtime only as data, never its readers",
        from: &["status"],
        from_except: &[],
        never: &["runtime", "pleg", "triggers", "sync_loop", "observe", "serve"],
        but_may: &[],
    },
    Layer {
        rule: "the syncLoop never reaches the runtime: it reads the PLEG's handle",
        from: &["sync_loop"],
        from_except: &[],
        never: &["runtime", "triggers", "observe", "serve"],
        but_may: &[],
    },
    Layer {
        rule: "serve is reached only from the daemon's wiring and its flags",
        from: &["*"],
        from_except: &["serve", "daemon", "cli", "observe::server"],
        never: &["serve"],
        but_may: &[],
    },
    Layer {
        rule: "the observation API's listener borrows only serve's connection bounds",
        from: &["observe::server"],
        from_except: &[],
        never: &["serve"],
        but_may: &["serve::listen"],
    },
    Layer {
        rule: "the observation API neither borrows from `plegd watch` nor feeds the syncLoop",
        from: &["observe::mod", "observe::client", "observe::server"],
        from_except: &[],
        never: &["observe::watch", "sync_loop", "daemon"],
        but_may: &[],
    },
    Layer {
        rule: "observe is beside the flow: only the wiring and the commands use it",
        from: &["*"],
        from_except: &["observe", "daemon", "cli"],
        never: &["observe"],
        but_may: &[],
    },
    Layer {
        rule: "only the command line uses the daemon's wiring, and nothing uses the command line",
        from: &["*"],
        from_except: &["cli"],
        never: &["cli", "daemon"],
        but_may: &[],
    },
];

/// Whether `module` is named by `pattern` (see [`Layer`]).
fn named(module: &str, pattern: &str) -> bool {
    match pattern.strip_suffix("::mod") {
        _ if pattern == "*" => true,
        Some(exact) => module == exact,
        None => module == pattern || module.starts_with(&format!("{pattern}::")),
    }
}

/// Every use that breaks a layer, as "rule: module uses target".
fn broken_layers(uses: &BTreeMap<String, BTreeSet<String>>, layers: &[Layer]) -> Vec<String> {
    let mut broken = Vec::new();
    for layer in layers {
        let any = |patterns: &[&str], module: &str| patterns.iter().any(|p| named(module, p));
        for (module, targets) in uses {
            if !any(layer.from, module) || any(layer.from_except, module) {
                continue;
            }
            for target in targets {
                if any(layer.never, target) && !any(layer.but_may, target) {
                    broken.push(format!("{}: {module} uses {target}", layer.rule));
                }
            }
        }
    }
    broken
}

/// The rooms keep to their jobs: only `src/runtime/` speaks CRI or containerd's API (the README
/// says so), and every layer of docs/architecture.md holds.
#[test]
fn each_room_keeps_to_its_job() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = read_sources(&src);
    let uses = graph(&modules);
    let mut strays = Vec::new();
    for (name, code) in &modules {
        if name == "runtime" || name.starts_with("runtime::") {
            continue;
        }
        for wire in ["k8s_cri::", "containerd_client::", "tonic::include_proto!(\"runtime"] {
            if code.contains(wire) {
                strays.push(format!("{name} uses {wire}"));
            }
        }
        if uses[name].contains("runtime::lists") {
            strays.push(format!("{name} uses the CRI messages (runtime::lists)"));
        }
    }
    assert!(strays.is_empty(), "CRI spoken outside src/runtime/: {strays:?}");
    assert!(
        uses["runtime::events"].contains("runtime::lists"),
        "the check reads the files"
    );
    let broken = broken_layers(&uses, LAYERS);
    assert!(
        broken.is_empty(),
        "imports against the layers of docs/architecture.md:\n{}",
        broken.join("\n")
    );
}

/// Each layer, broken on purpose: one wrong import added to the project's own modules is found,
/// and named by its rule (and by no other rule that does not forbid it too).
#[test]
fn every_layer_catches_a_wrong_import() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = read_sources(&src);
    let wrong: [(&str, &str, &str); 15] = [
        (LAYERS[0].rule, "util::backoff", "use crate::metrics::Metrics;"),
        (LAYERS[1].rule, "metrics", "use crate::apiserver::pod::ApiPod;"),
        (LAYERS[2].rule, "kubecontainer", "use crate::runtime::CriRuntime;"),
        (
            LAYERS[3].rule,
            "runtime::convert",
            "use crate::pleg::PodLifecycleEvent;",
        ),
        (LAYERS[4].rule, "pleg::records", "use crate::triggers::Trigger;"),
        (
            LAYERS[5].rule,
            "triggers::schedule",
            "use crate::apiserver::pod::ApiPod;",
        ),
        (
            LAYERS[6].rule,
            "apiserver::informer",
            "use crate::kubecontainer::RuntimePod;",
        ),
        (
            LAYERS[7].rule,
            "status::generate::phase",
            "use crate::apiserver::client::ClientError;",
        ),
        (LAYERS[8].rule, "status::manager", "use crate::pleg::PlegHandle;"),
        (LAYERS[9].rule, "sync_loop", "use crate::runtime::CriRuntime;"),
        (LAYERS[10].rule, "status::manager", "use crate::serve::http::Health;"),
        (
            LAYERS[11].rule,
            "observe::server",
            "use crate::serve::tls::ServingCertificate;",
        ),
        (
            LAYERS[12].rule,
            "observe::client",
            "use crate::observe::watch::WatchOptions;",
        ),
        (LAYERS[13].rule, "pleg::fan_out", "use crate::observe::to_api;"),
        (LAYERS[14].rule, "status::release", "use crate::cli::Cli;"),
    ];
    assert_eq!(wrong.len(), LAYERS.len(), "a wrong import for every layer");
    assert!(
        broken_layers(&graph(&modules), LAYERS).is_empty(),
        "the project keeps every layer"
    );
    for (rule, module, import) in wrong {
        let mut changed = modules.clone();
        let source = changed.get_mut(module).unwrap_or_else(|| panic!("no module {module}"));
        source.push_str(&code(import));
        source.push('\n');
        let broken = broken_layers(&graph(&changed), LAYERS);
        assert!(
            broken.iter().any(|b| b.starts_with(&format!("{rule}: {module} uses "))),
            "{import} in {module} breaks \"{rule}\"; found {broken:?}"
        );
    }
}

/// A pattern names a module and what is inside it; `x::mod` the file alone; `*` everything.
#[test]
fn a_layer_names_modules_as_written() {
    assert!(named("status::generate::phase", "status::generate"));
    assert!(named("status", "status"));
    assert!(!named("status_report", "status"), "a room, not a prefix of letters");
    assert!(named("status", "status::mod"));
    assert!(!named("status::manager", "status::mod"));
    assert!(named("anything::at_all", "*"));
}

#[test]
fn a_circle_is_found_through_any_path_form() {
    let modules: Sources = [
        ("crate", "pub mod a;\npub mod b;\npub mod c;"),
        ("a", "use crate::{b::Thing, c};"),
        ("b", "fn f() -> super::c::Other { todo!() }"),
        ("c", "// use crate::a;\nuse crate::a::Start;"),
        ("c::inner", "use super::super::c::Other;"),
    ]
    .into_iter()
    .map(|(name, source)| (name.to_owned(), code(source)))
    .collect();
    let uses = graph(&modules);
    assert_eq!(uses["a"], ["b", "c"].map(str::to_owned).into());
    assert_eq!(
        uses["c::inner"],
        BTreeSet::new(),
        "a module and its parent are one room"
    );
    let found = circle(&uses).expect("a → c → a");
    assert_eq!(found.first(), found.last());
    assert!(
        found.contains(&"a".to_owned()) && found.contains(&"c".to_owned()),
        "{found:?}"
    );
    // Without the edge back, no circle.
    let mut modules = modules;
    modules.insert("c".into(), code("pub struct Other;"));
    assert_eq!(circle(&graph(&modules)), None);
    assert_eq!(circle(&rooms(&graph(&modules))), None);
    // A submodule using a module that uses its parent: no circle between files, one between rooms.
    modules.insert("c::inner".into(), code("use crate::b::Thing;"));
    modules.insert("b".into(), code("use crate::c::Other;"));
    assert_eq!(circle(&graph(&modules)), None);
    let found = circle(&rooms(&graph(&modules))).expect("b → c → b");
    assert!(
        found.contains(&"b".to_owned()) && found.contains(&"c".to_owned()),
        "{found:?}"
    );
}

/// Test code is not code, wherever it stands and whatever braces its strings hold: only the
/// production paths count, and the files a module declares under `#[cfg(test)]` are test code.
#[test]
fn test_code_is_left_out_wherever_it_stands() {
    let source = r##"use crate::a::A;
#[cfg(test)]
use crate::b::B;
#[cfg(test)]
#[derive(Debug)]
struct Fixture<'a> { braces: &'a str, bytes: [u8; 4] }
#[cfg(test)]
fn helper() -> char { let _ = "}{\"}"; let _ = r#"}"#; let _ = '\''; '}' } // {
#[cfg(all(test, feature = "x"))]
pub(crate) mod script { use crate::c::C; fn f() { if true { crate::c::g() } } }
#[cfg(test)]
mod test_support;
fn after<'a>(x: &'a str) -> crate::d::D { todo!() }
#[cfg(test)]
mod tests { use crate::e::E; }
#[cfg(any(test, feature = "test-util"))]
pub mod patch_apply;
fn last() -> crate::f::F { todo!() }
"##;
    let kept = code(source);
    let mut used: Vec<String> = paths(&kept).into_iter().map(|p| p.join("::")).collect();
    used.sort();
    assert_eq!(used, ["crate::a::A", "crate::d::D", "crate::f::F"], "{kept}");
    assert!(kept.contains("pub mod patch_apply;"), "built with a feature too: code");
    assert_eq!(test_modules(source), ["script", "test_support", "tests"]);
    // The project's own files: status generation's test fixtures are test code.
    let modules = read_sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(!modules.contains_key("status::generate::test_support"));
    assert!(!modules.contains_key("status::generate::tests"));
    assert!(modules.contains_key("status::generate::ips"));
}

/// `src/`'s root holds the crate, the binary and the daemon's wiring; everything else is in a room
/// whose opening comment says its job in one sentence.
#[test]
fn every_file_is_in_a_room_that_says_its_job() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut loose = Vec::new();
    let mut rooms = Vec::new();
    for entry in std::fs::read_dir(&src).expect("read src") {
        let path = entry.expect("dir entry").path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            rooms.push(name);
        } else if !["lib.rs", "main.rs", "daemon.rs"].contains(&name.as_str()) {
            loose.push(name);
        }
    }
    assert!(loose.is_empty(), "files loose at src/'s root: {loose:?}");
    assert!(rooms.len() >= 10, "{rooms:?}");
    for room in rooms {
        let opening = std::fs::read_to_string(src.join(&room).join("mod.rs"))
            .unwrap_or_else(|e| panic!("src/{room}/mod.rs: {e}"));
        let first = opening.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("//! ") && first.len() > 20,
            "src/{room}/mod.rs opens without saying its job: {first:?}"
        );
    }
}
