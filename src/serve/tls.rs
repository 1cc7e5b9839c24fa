//! `/metrics` over TLS: the certificate its listener serves.
//!
//! A reader of `/metrics` sends a bearer token, which must never cross the pod network in clear
//! text; so wherever `/metrics` asks for one, its listener speaks TLS, as the kubelet's
//! authenticated port and controller-runtime's secure metrics server do. The certificate comes
//! from files (`--metrics-tls-cert-file`, `--metrics-tls-private-key-file`: a Secret that
//! cert-manager or an operator keeps, mounted into plegd's pod), re-read when they change, or,
//! without them, plegd makes one at start: self-signed, an ECDSA P-256 key that never leaves the
//! process, renewed before it expires. Its SHA-256 fingerprint is logged, so a reader can pin it.
//!
//! The core is pure ([`plan`]: what a check of the source calls for, from what is served and what
//! the files say now); [`ServingCertificate`] is its shell, the certificate resolver of the
//! listener's rustls configuration. The listener calls [`ServingCertificate::refresh`] as it
//! accepts connections; a check runs at most every [`CHECK_INTERVAL`], and a new certificate that
//! cannot be used (unreadable, no key, a key of another certificate) is logged, counted in
//! `plegd_tls_certificate_reloads_total{result="failed"}`, and the one served before stays.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tracing::{info, warn};

use crate::metrics::Metrics;

/// How often the source is checked for a new certificate (files changed, a self-made one due for
/// renewal): cert-manager's renewals reach readers within this and a kept-alive connection's age.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(10);
/// Lifetime of a certificate plegd makes itself.
pub const SELF_SIGNED_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// A certificate plegd made is made anew this long before it expires.
pub const RENEW_BEFORE: Duration = Duration::from_secs(30 * 24 * 3600);
/// Largest certificate or key file plegd reads (a chain of a few certificates is a few KiB).
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// Where the served certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertificateSource {
    /// PEM files: the certificate (its chain after it) and its private key (PKCS#8, PKCS#1 or
    /// SEC1), re-read when either changes.
    Files { cert: PathBuf, key: PathBuf },
    /// Made by plegd, self-signed, for these DNS names and IP addresses.
    SelfSigned { names: Vec<String> },
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {error}")]
    Read { path: PathBuf, error: std::io::Error },
    #[error("{path}: larger than {MAX_FILE_BYTES} bytes")]
    TooLarge { path: PathBuf },
    #[error("{path}: no PEM certificate in it")]
    NoCertificate { path: PathBuf },
    #[error("{path}: no usable PEM private key in it ({reason})")]
    NoKey { path: PathBuf, reason: String },
    #[error("{key} is not the private key of {cert}: {reason}")]
    Unusable {
        cert: PathBuf,
        key: PathBuf,
        reason: String,
    },
    #[error("making a self-signed certificate: {0}")]
    Generate(rcgen::Error),
}

/// A certificate ready to serve, with what it came from.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub key: Arc<CertifiedKey>,
    /// The files as they were when read (`None`: made by plegd).
    pub stamp: Option<FilesStamp>,
    /// When the certificate expires, if its DER could be read.
    pub not_after: Option<SystemTime>,
}

/// What identifies a file's content without reading it: a new Secret's files are new inodes (the
/// kubelet swaps a symlink), a file rewritten in place has a new modification time or length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    modified: Option<SystemTime>,
}

/// The stamps of the certificate and key files.
pub type FilesStamp = (FileStamp, FileStamp);

fn stamp(path: &Path) -> Result<FileStamp, TlsError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).map_err(|error| TlsError::Read {
        path: path.to_owned(),
        error,
    })?;
    Ok(FileStamp {
        dev: meta.dev(),
        ino: meta.ino(),
        len: meta.len(),
        modified: meta.modified().ok(),
    })
}

fn read_bounded(path: &Path) -> Result<Vec<u8>, TlsError> {
    use std::io::Read;
    let read_error = |error| TlsError::Read {
        path: path.to_owned(),
        error,
    };
    let file = std::fs::File::open(path).map_err(read_error)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(TlsError::TooLarge { path: path.to_owned() });
    }
    Ok(bytes)
}

fn provider() -> CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// The certificate and key in these PEM files, checked to belong together.
pub fn load_files(cert: &Path, key: &Path) -> Result<Loaded, TlsError> {
    let stamps = (stamp(cert)?, stamp(key)?);
    let cert_pem = read_bounded(cert)?;
    let key_pem = read_bounded(key)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .filter_map(Result::ok)
        .collect();
    if chain.is_empty() {
        return Err(TlsError::NoCertificate { path: cert.to_owned() });
    }
    let private = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::NoKey {
        path: key.to_owned(),
        reason: e.to_string(),
    })?;
    let not_after = not_after(&chain[0]);
    let certified = CertifiedKey::from_der(chain, private, &provider()).map_err(|e| TlsError::Unusable {
        cert: cert.to_owned(),
        key: key.to_owned(),
        reason: e.to_string(),
    })?;
    Ok(Loaded {
        key: Arc::new(certified),
        stamp: Some(stamps),
        not_after,
    })
}

/// A self-signed certificate for `names` (each an IP address or a DNS name), valid from an hour
/// before `now` (clocks of readers a little behind) for [`SELF_SIGNED_VALIDITY`].
pub fn self_signed(names: &[String], now: SystemTime) -> Result<Loaded, TlsError> {
    let mut params = rcgen::CertificateParams::new(names.to_vec()).map_err(TlsError::Generate)?;
    let mut subject = rcgen::DistinguishedName::new();
    subject.push(rcgen::DnType::CommonName, "plegd");
    params.distinguished_name = subject;
    let from = now.checked_sub(Duration::from_secs(3600)).unwrap_or(now);
    let until = now + SELF_SIGNED_VALIDITY;
    params.not_before = time::OffsetDateTime::from(from);
    params.not_after = time::OffsetDateTime::from(until);
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let key_pair = rcgen::KeyPair::generate().map_err(TlsError::Generate)?;
    let cert = params.self_signed(&key_pair).map_err(TlsError::Generate)?;
    let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key_pair.serialize_der()));
    let der = cert.der().clone();
    let not_after = not_after(&der);
    let certified = CertifiedKey::from_der(vec![der], private, &provider()).map_err(|e| TlsError::Unusable {
        cert: PathBuf::from("(self-signed)"),
        key: PathBuf::from("(generated)"),
        reason: e.to_string(),
    })?;
    Ok(Loaded {
        key: Arc::new(certified),
        stamp: None,
        not_after,
    })
}

/// What a check of the source calls for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refresh {
    /// The served certificate stays.
    Keep,
    /// The files changed: read them again.
    Reload,
    /// The self-made certificate is within [`RENEW_BEFORE`] of its end: make another.
    Renew,
}

/// What the source calls for, from the served certificate, the files' stamps as they are now
/// (`None` when made by plegd, or the files cannot be read now: the served one stays) and the
/// time now.
pub fn plan(served: &Loaded, files_now: Option<FilesStamp>, now: SystemTime) -> Refresh {
    match (served.stamp, files_now) {
        (Some(was), Some(is)) if was != is => Refresh::Reload,
        (Some(_), _) => Refresh::Keep,
        (None, _) => match served.not_after {
            Some(end) if now + RENEW_BEFORE >= end => Refresh::Renew,
            _ => Refresh::Keep,
        },
    }
}

/// The certificate a listener serves, and its source; the resolver of the listener's rustls
/// configuration.
#[derive(Debug)]
pub struct ServingCertificate {
    source: CertificateSource,
    served: RwLock<Loaded>,
    /// When the source was last checked (the monotonic clock).
    checked: Mutex<Instant>,
    /// The files' stamps at the last failed load, so that one bad pair is reported once.
    failed: Mutex<Option<FilesStamp>>,
    metrics: Arc<Metrics>,
}

impl ServingCertificate {
    /// The certificate of `source`, loaded or made now; an error when the files cannot be used.
    pub fn new(
        source: CertificateSource,
        metrics: Arc<Metrics>,
        now: Instant,
        wall: SystemTime,
    ) -> Result<Self, TlsError> {
        let loaded = match &source {
            CertificateSource::Files { cert, key } => load_files(cert, key)?,
            CertificateSource::SelfSigned { names } => self_signed(names, wall)?,
        };
        describe(&source, &loaded, "serving");
        metrics.set_tls_certificate_expiry(loaded.not_after);
        Ok(Self {
            source,
            served: RwLock::new(loaded),
            checked: Mutex::new(now),
            failed: Mutex::new(None),
            metrics,
        })
    }

    /// A rustls server configuration that serves this certificate (HTTP/1.1, TLS 1.2 and 1.3,
    /// no client certificate asked).
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<rustls::ServerConfig>, rustls::Error> {
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(provider()))
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// The certificate served now.
    pub fn current(&self) -> Loaded {
        self.served.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Check the source if [`CHECK_INTERVAL`] has passed since the last check, and serve what it
    /// calls for.
    pub fn refresh(&self, now: Instant, wall: SystemTime) {
        {
            let mut checked = self.checked.lock().unwrap_or_else(|e| e.into_inner());
            if now.saturating_duration_since(*checked) < CHECK_INTERVAL {
                return;
            }
            *checked = now;
        }
        let files_now = match &self.source {
            CertificateSource::Files { cert, key } => stamp(cert).and_then(|c| Ok((c, stamp(key)?))).ok(),
            CertificateSource::SelfSigned { .. } => None,
        };
        let served = self.current();
        let made = match plan(&served, files_now, wall) {
            Refresh::Keep => return,
            Refresh::Reload => {
                let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
                if *failed == files_now {
                    return;
                }
                let CertificateSource::Files { cert, key } = &self.source else {
                    return;
                };
                let loaded = load_files(cert, key);
                *failed = if loaded.is_err() { files_now } else { None };
                loaded
            }
            Refresh::Renew => match &self.source {
                CertificateSource::SelfSigned { names } => self_signed(names, wall),
                CertificateSource::Files { .. } => return,
            },
        };
        match made {
            Ok(loaded) => {
                describe(&self.source, &loaded, "now serving");
                self.metrics.count_tls_certificate_reload("loaded");
                self.metrics.set_tls_certificate_expiry(loaded.not_after);
                *self.served.write().unwrap_or_else(|e| e.into_inner()) = loaded;
            }
            Err(error) => {
                warn!(error = %error, "a new certificate for /metrics cannot be used; the one served before stays");
                self.metrics.count_tls_certificate_reload("failed");
            }
        }
    }
}

impl ResolvesServerCert for ServingCertificate {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.served.read().unwrap_or_else(|e| e.into_inner()).key.clone())
    }
}

/// The SHA-256 fingerprint of a certificate's DER, as `openssl x509 -fingerprint -sha256` prints
/// it (`AB:CD:…`) and plegd logs it.
pub fn fingerprint(der: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, der)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Log what is served: where it came from, its fingerprint (SHA-256 of its DER, as `openssl x509
/// -fingerprint -sha256` prints it) and its end.
fn describe(source: &CertificateSource, loaded: &Loaded, what: &str) {
    let fingerprint = fingerprint(loaded.key.cert.first().map(|c| c.as_ref()).unwrap_or_default());
    let not_after = loaded
        .not_after
        .map(|t| humantime::format_rfc3339_seconds(t).to_string());
    match source {
        CertificateSource::Files { cert, .. } => info!(
            cert = %cert.display(), sha256 = %fingerprint, not_after = not_after.as_deref().unwrap_or("unknown"),
            "/metrics {what} the certificate of its files"
        ),
        CertificateSource::SelfSigned { names } => info!(
            names = ?names, sha256 = %fingerprint, not_after = not_after.as_deref().unwrap_or("unknown"),
            "/metrics {what} a self-signed certificate plegd made (no --metrics-tls-cert-file given)"
        ),
    }
}

/// The names a self-made certificate is for: `localhost`, the node's name, the loopback
/// addresses, the listener's own address when it names one, and the node's addresses.
pub fn self_signed_names(node_name: &str, listen: Option<IpAddr>, node_ips: &[String]) -> Vec<String> {
    let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()];
    let mut add = |name: String| {
        if !name.is_empty() && !names.contains(&name) {
            names.push(name);
        }
    };
    add(node_name.to_owned());
    if let Some(ip) = listen.filter(|ip| !ip.is_unspecified()) {
        add(ip.to_string());
    }
    for ip in node_ips {
        add(ip.clone());
    }
    names
}

/// When an X.509 certificate expires (its `validity.notAfter`, a UTCTime or a GeneralizedTime);
/// `None` when its DER is not a certificate as RFC 5280 says, or its end is before 1970.
pub fn not_after(cert: &[u8]) -> Option<SystemTime> {
    let (_, certificate) = x509_parser::parse_x509_certificate(cert).ok()?;
    let seconds = u64::try_from(certificate.validity().not_after.timestamp()).ok()?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        // A new file each time (a new inode, as a Secret's update gives), never one rewritten.
        let _ = std::fs::remove_file(&path);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn pem_pair(names: &[&str]) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn a_self_made_certificate_names_the_node_and_lasts_a_year() {
        let names = self_signed_names("node-1", Some("0.0.0.0".parse().unwrap()), &["10.0.0.7".into()]);
        assert_eq!(names, ["localhost", "127.0.0.1", "::1", "node-1", "10.0.0.7"]);
        let loaded = self_signed(&names, now()).unwrap();
        assert_eq!(loaded.not_after, Some(now() + SELF_SIGNED_VALIDITY));
        assert!(loaded.stamp.is_none());
        // The DER rustls serves names them (a reader that checks names finds the node's).
        let der = loaded.key.cert[0].as_ref();
        let contains = |needle: &[u8]| der.windows(needle.len()).any(|w| w == needle);
        assert!(contains(b"node-1"));
        assert!(contains(&[10, 0, 0, 7]));
    }

    #[test]
    fn a_self_made_certificate_is_renewed_a_month_before_its_end() {
        let loaded = self_signed(&["localhost".into()], now()).unwrap();
        assert_eq!(plan(&loaded, None, now()), Refresh::Keep);
        let end = now() + SELF_SIGNED_VALIDITY;
        assert_eq!(
            plan(&loaded, None, end - RENEW_BEFORE - Duration::from_secs(1)),
            Refresh::Keep
        );
        assert_eq!(plan(&loaded, None, end - RENEW_BEFORE), Refresh::Renew);
    }

    #[test]
    fn files_are_read_again_when_they_change_and_a_bad_pair_keeps_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let (cert_pem, key_pem) = pem_pair(&["first.test"]);
        let cert = write(dir.path(), "tls.crt", &cert_pem);
        let key = write(dir.path(), "tls.key", &key_pem);
        let metrics = Arc::new(Metrics::new());
        let start = Instant::now();
        let serving = ServingCertificate::new(
            CertificateSource::Files {
                cert: cert.clone(),
                key: key.clone(),
            },
            metrics.clone(),
            start,
            now(),
        )
        .unwrap();
        let first = serving.current().key.cert[0].clone();
        let served_now = || serving.current().key.cert[0].clone();
        // Unchanged files: nothing read.
        serving.refresh(start + CHECK_INTERVAL, now());
        assert_eq!(served_now(), first);
        // A new certificate whose key has not come yet: the old pair stays, one failure counted.
        let (second_cert, second_key) = pem_pair(&["second.test"]);
        write(dir.path(), "tls.crt", &second_cert);
        serving.refresh(start + 2 * CHECK_INTERVAL, now());
        assert_eq!(served_now(), first);
        serving.refresh(start + 3 * CHECK_INTERVAL, now());
        let failures =
            |m: &Metrics| crate::metrics::sample(&m.encode(), "plegd_tls_certificate_reloads_total{result=\"failed\"}");
        assert_eq!(failures(&metrics), Some(1.0), "one bad pair is reported once");
        // Its key comes: the new pair is served, but not before the check interval.
        write(dir.path(), "tls.key", &second_key);
        serving.refresh(start + 3 * CHECK_INTERVAL + Duration::from_secs(1), now());
        assert_eq!(served_now(), first);
        serving.refresh(start + 4 * CHECK_INTERVAL, now());
        assert_ne!(served_now(), first);
        assert!(served_now().as_ref().windows(11).any(|w| w == b"second.test"));
    }

    #[test]
    fn unusable_files_are_refused_with_their_path() {
        let dir = tempfile::tempdir().unwrap();
        let (cert_pem, key_pem) = pem_pair(&["a.test"]);
        let (_, other_key) = pem_pair(&["b.test"]);
        let cert = write(dir.path(), "tls.crt", &cert_pem);
        let key = write(dir.path(), "tls.key", &key_pem);
        let wrong = write(dir.path(), "other.key", &other_key);
        let empty = write(dir.path(), "empty.pem", "");
        let missing = dir.path().join("missing.pem");
        let message = |c: &Path, k: &Path| load_files(c, k).map(|_| ()).unwrap_err().to_string();
        assert!(load_files(&cert, &key).is_ok());
        assert!(
            message(&cert, &wrong).contains("is not the private key of"),
            "{}",
            message(&cert, &wrong)
        );
        assert!(message(&empty, &key).contains("no PEM certificate"));
        assert!(message(&cert, &empty).contains("no usable PEM private key"));
        assert!(message(&missing, &key).contains("missing.pem"));
        let big = write(dir.path(), "big.pem", &"x".repeat(MAX_FILE_BYTES as usize + 1));
        assert!(message(&big, &key).contains("larger than"));
    }

    #[test]
    fn not_after_reads_utc_and_generalized_times_and_refuses_garbage() {
        let (cert_pem, _) = pem_pair(&["a.test"]);
        let der = CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap();
        // rcgen's default end: 4096-01-01, a GeneralizedTime.
        let end = not_after(&der).unwrap();
        assert_eq!(
            humantime::format_rfc3339_seconds(end).to_string(),
            "4096-01-01T00:00:00Z"
        );
        let made = self_signed(&["a.test".into()], now()).unwrap();
        assert_eq!(made.not_after, Some(now() + SELF_SIGNED_VALIDITY), "a UTCTime");
        for cut in [0, 1, 10, der.len() / 2, der.len() - 1] {
            let _ = not_after(&der[..cut]);
        }
        assert_eq!(not_after(b"\x30\x84\xff\xff\xff\xff"), None);
        assert_eq!(not_after(&[]), None);
    }
}
