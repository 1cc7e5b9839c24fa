//! How a lifecycle event is printed: one line of text, or one JSON object. `plegd watch` and
//! `plegd events` both print with it (and `plegd status` with its helpers). Every string in an event came from the runtime: none may
//! break a line or reach a terminal with its control characters.

use crate::pleg::PodLifecycleEvent;

/// How events are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// One readable line per event.
    Text,
    /// One JSON object per line.
    Json,
}

/// One event as a line, without the newline.
pub fn format_event(event: &PodLifecycleEvent, format: OutputFormat) -> String {
    match format {
        // Serializing plain strings and numbers cannot fail.
        OutputFormat::Json => serde_json::to_string(event).unwrap_or_default(),
        OutputFormat::Text => {
            // Every string here came from the runtime: no control character reaches the terminal.
            let pod = match (&event.namespace, &event.pod) {
                (Some(ns), Some(name)) => format!("{}/{}", printable(ns), printable(name)),
                (None, Some(name)) => printable(name),
                _ => format!("uid={}", printable(&event.pod_uid)),
            };
            let mut line = format!(
                "{}  {:<16}  {}",
                humantime::format_rfc3339_millis(event.timestamp),
                event.kind.as_str(),
                pod
            );
            if event.sandbox {
                line.push_str("  sandbox");
            } else if let Some(name) = &event.container {
                line.push_str("  container=");
                line.push_str(&printable(name));
            }
            if let Some(id) = &event.container_id {
                line.push_str("  id=");
                line.push_str(&printable(short_id(id)));
            }
            if let Some(code) = event.exit_code {
                line.push_str(&format!("  exit_code={code}"));
            }
            if let Some(reason) = &event.reason {
                line.push_str("  reason=");
                line.push_str(&printable(reason));
            }
            if let Some(message) = &event.message {
                // Quoted: a message has spaces, and its own quotes and backslashes are escaped.
                line.push_str("  message=");
                line.push_str(&format!("{:?}", message));
            }
            line
        }
    }
}

/// The first 13 characters of an id, as `crictl` shows them (characters, not bytes: an id is
/// whatever the runtime sent).
pub fn short_id(id: &str) -> &str {
    id.char_indices().nth(13).map_or(id, |(end, _)| &id[..end])
}

/// A runtime string for a text line: control characters (a newline could forge a line) escaped.
pub fn printable(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_owned();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pleg::PodLifecycleEventType;

    #[test]
    fn runtime_strings_are_cut_by_character_and_never_break_the_line() {
        assert_eq!(short_id("0123456789abcdef"), "0123456789abc");
        assert_eq!(short_id("short"), "short");
        // Multi-byte characters around the 13th: no panic, whole characters.
        assert_eq!(short_id("ééééééééééééééé"), "ééééééééééééé");
        assert_eq!(short_id("0123456789ab€x"), "0123456789ab€");
        let event = PodLifecycleEvent {
            kind: PodLifecycleEventType::ContainerDied,
            pod_uid: "u1".into(),
            container_id: Some("€€€€€€€€€€€€€€€€".into()),
            namespace: Some("ns".into()),
            pod: Some("web\nforged line".into()),
            container: Some("c\u{1b}[31m".into()),
            sandbox: false,
            exit_code: Some(1),
            reason: Some("Error\r".into()),
            message: None,
            timestamp: std::time::UNIX_EPOCH,
        };
        let line = format_event(&event, OutputFormat::Text);
        assert_eq!(line.lines().count(), 1, "{line}");
        assert!(line.contains("ns/web\\nforged line"), "{line}");
        assert!(line.contains("container=c\\u{1b}[31m"), "{line}");
        assert!(line.contains("id=€€€€€€€€€€€€€  "), "{line}");
        assert!(line.ends_with("reason=Error\\r"), "{line}");

        // A termination message: quoted, its quotes, newlines and escapes escaped, on one line.
        let event = PodLifecycleEvent {
            message: Some("panic: \"boom\"\nat main.go:3\u{1b}[2J".into()),
            ..event
        };
        let line = format_event(&event, OutputFormat::Text);
        assert_eq!(line.lines().count(), 1, "{line}");
        assert!(
            line.ends_with(r#"message="panic: \"boom\"\nat main.go:3\u{1b}[2J""#),
            "{line}"
        );
        let json: serde_json::Value = serde_json::from_str(&format_event(&event, OutputFormat::Json)).unwrap();
        assert_eq!(json["message"], "panic: \"boom\"\nat main.go:3\u{1b}[2J");
    }
}
