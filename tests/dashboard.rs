//! deploy/components/grafana-dashboard/grafana-dashboard.json is a Grafana dashboard whose every query names metrics plegd
//! actually exports (so a renamed metric cannot silently empty a panel).

use std::collections::BTreeSet;

use serde_json::Value;

#[test]
fn every_metric_in_the_dashboard_exists() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/components/grafana-dashboard/grafana-dashboard.json"
    ))
    .unwrap();
    let dashboard: Value = serde_json::from_str(&text).expect("valid JSON");
    assert_eq!(dashboard["uid"], "plegd");
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 10);

    let metrics = plegd::metrics::Metrics::new();
    let families: BTreeSet<&str> = metrics.names().iter().map(String::as_str).collect();

    let mut used = BTreeSet::new();
    for panel in panels {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("expr");
            let mut rest = expr;
            while let Some(at) = rest.find("plegd_") {
                let name: String = rest[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                rest = &rest[at + name.len()..];
                used.insert(name);
            }
        }
    }
    assert!(used.len() >= 15, "{used:?}");
    // docs/operating.md names every panel.
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operating.md")).unwrap();
    for panel in panels {
        let title = panel["title"].as_str().expect("title");
        assert!(
            readme.contains(&format!("*{title}*")),
            "docs/operating.md does not name panel {title:?}"
        );
    }
    for name in &used {
        let family = ["_total", "_bucket", "_count", "_sum"]
            .iter()
            .fold(name.as_str(), |n, s| n.strip_suffix(s).unwrap_or(n));
        assert!(
            families.contains(family),
            "the dashboard queries {name}, which plegd does not export ({families:?})"
        );
    }
}
