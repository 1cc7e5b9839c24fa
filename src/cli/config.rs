//! The config file (`--config`): a TOML table keyed by flag name, turned into flags put in front
//! of the command line. Only a regular file of at most [`MAX_CONFIG_BYTES`] is read; an unknown
//! key, a value of the wrong type or a bad value is refused by its name.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::args::Cli;

/// The largest config file read (a real one is a few hundred bytes).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Why the config file cannot be used. Each message names the file and the setting.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--config {path}: {error}")]
    Read { path: PathBuf, error: std::io::Error },
    #[error("--config {path}: not a regular file")]
    NotRegular { path: PathBuf },
    #[error("--config {path}: larger than {max} bytes")]
    TooLarge { path: PathBuf, max: u64 },
    #[error("--config {path}: not valid TOML: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("--config {path}: unknown setting {key:?} for `plegd {command}`")]
    Unknown {
        path: PathBuf,
        key: String,
        command: String,
    },
    #[error("--config {path}: setting {key:?} must be {expected}")]
    Type {
        path: PathBuf,
        key: String,
        expected: &'static str,
    },
}

fn config_value(value: &toml::Value) -> Option<Vec<String>> {
    match value {
        toml::Value::String(s) => Some(vec![s.clone()]),
        toml::Value::Integer(i) => Some(vec![i.to_string()]),
        toml::Value::Float(f) => Some(vec![f.to_string()]),
        toml::Value::Boolean(b) => Some(vec![b.to_string()]),
        toml::Value::Array(items) => items
            .iter()
            .map(config_value)
            .collect::<Option<Vec<_>>>()
            .map(|v| v.concat()),
        _ => None,
    }
}

/// The file's text: a regular file (never a FIFO or device, which could block or never end),
/// read up to the size bound.
fn read_bounded(path: &Path) -> Result<String, ConfigError> {
    let read = |error| ConfigError::Read {
        path: path.to_owned(),
        error,
    };
    // stat before open: opening a FIFO would wait for a writer.
    if !std::fs::metadata(path).map_err(read)?.is_file() {
        return Err(ConfigError::NotRegular { path: path.to_owned() });
    }
    let file = std::fs::File::open(path).map_err(read)?;
    // The file could have been swapped between the two calls: check what was opened.
    let meta = file.metadata().map_err(read)?;
    if !meta.is_file() {
        return Err(ConfigError::NotRegular { path: path.to_owned() });
    }
    let too_large = || ConfigError::TooLarge {
        path: path.to_owned(),
        max: MAX_CONFIG_BYTES,
    };
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(too_large());
    }
    let mut text = String::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(read)?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(too_large());
    }
    Ok(text)
}

/// The command line with the config file's settings put in front of it: each setting becomes the
/// flag of the same name unless that flag's environment variable is set; flags given on the command
/// line come later and win.
pub fn args_with_config(args: Vec<OsString>, path: &Path) -> Result<Vec<OsString>, ConfigError> {
    use clap::CommandFactory;
    let text = read_bounded(path)?;
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| ConfigError::Syntax {
        path: path.to_owned(),
        message: e.message().trim().to_owned(),
    })?;
    // The subcommand is the first argument that names one.
    let command = Cli::command();
    let Some((position, sub)) = args.iter().enumerate().skip(1).find_map(|(i, a)| {
        let a = a.to_str()?;
        command.find_subcommand(a).map(|c| (i, c.clone()))
    }) else {
        return Ok(args);
    };
    let mut injected = Vec::new();
    for (key, value) in &table {
        let arg = sub
            .get_arguments()
            .chain(command.get_arguments())
            .find(|a| a.get_long() == Some(key.as_str()));
        let Some(arg) = arg.filter(|a| a.get_id() != "config") else {
            return Err(ConfigError::Unknown {
                path: path.to_owned(),
                key: key.clone(),
                command: sub.get_name().to_owned(),
            });
        };
        if arg.get_env().is_some_and(|env| std::env::var_os(env).is_some()) {
            continue;
        }
        let wrong_type = |expected| ConfigError::Type {
            path: path.to_owned(),
            key: key.clone(),
            expected,
        };
        if matches!(arg.get_action(), clap::ArgAction::SetTrue) {
            match value {
                toml::Value::Boolean(true) => injected.push(format!("--{key}").into()),
                toml::Value::Boolean(false) => {}
                _ => return Err(wrong_type("true or false")),
            }
            continue;
        }
        let values = config_value(value).ok_or_else(|| wrong_type("a string, number, boolean or list of them"))?;
        injected.push(format!("--{key}={}", values.join(",")).into());
    }
    let mut out = args;
    out.splice(position + 1..position + 1, injected);
    Ok(out)
}
