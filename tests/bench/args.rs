//! Flags of the bench binaries: `--name value`.

/// The value after `--name` on the command line, parsed; None when absent or unparsable.
pub fn arg<T: std::str::FromStr>(name: &str) -> Option<T> {
    let argv: Vec<String> = std::env::args().collect();
    argv.iter()
        .position(|a| a == name)
        .and_then(|i| argv.get(i + 1))
        .and_then(|v| v.parse().ok())
}
