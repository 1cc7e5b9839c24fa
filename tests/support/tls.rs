//! TLS as plegd's `/metrics` readers speak it: a certificate authority of the test's own and a
//! serving certificate it signed (what cert-manager would keep in a Secret), and an HTTPS GET that
//! trusts that authority, or only a certificate of a given SHA-256 fingerprint (one plegd made
//! itself and logged).

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

/// A test CA's certificate, and a serving certificate and key it signed, as PEM files.
pub struct Certificates {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A new CA in `dir`, and a serving certificate it signed for `names` (DNS names or IPs), in
/// files named `prefix`.crt and `prefix`.key (the CA: `prefix`-ca.crt).
pub fn certificates(dir: &Path, prefix: &str, names: &[&str]) -> Certificates {
    let ca_key = rcgen::KeyPair::generate().expect("CA key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("{prefix} test CA"));
    ca_params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("CA certificate");
    let key = rcgen::KeyPair::generate().expect("serving key");
    let mut params =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).expect("names");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &ca).expect("serving certificate");
    let files = Certificates {
        ca: dir.join(format!("{prefix}-ca.crt")),
        cert: dir.join(format!("{prefix}.crt")),
        key: dir.join(format!("{prefix}.key")),
    };
    std::fs::write(&files.ca, ca.pem()).unwrap();
    std::fs::write(&files.cert, cert.pem()).unwrap();
    std::fs::write(&files.key, key.serialize_pem()).unwrap();
    files
}

/// Whom an HTTPS client trusts.
#[derive(Debug, Clone)]
pub enum Trust {
    /// Certificates this CA (a PEM file) signed for the name asked for.
    Ca(PathBuf),
    /// A certificate of this SHA-256 fingerprint alone (`AB:CD:…`, as plegd logs it).
    Pinned(String),
}

/// The SHA-256 fingerprint of a certificate, as plegd logs it.
pub use plegd::serve::tls::fingerprint;

#[derive(Debug)]
struct PinnedVerifier {
    fingerprint: String,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl rustls::client::danger::ServerCertVerifier for PinnedVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        if fingerprint(end_entity) == self.fingerprint {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(format!(
                "certificate {} is not the pinned {}",
                fingerprint(end_entity),
                self.fingerprint
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

fn client_config(trust: &Trust) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("TLS versions");
    let config = match trust {
        Trust::Ca(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(ca).expect("CA file") {
                roots.add(cert.expect("CA certificate")).expect("CA certificate");
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        Trust::Pinned(fingerprint) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(PinnedVerifier {
                fingerprint: fingerprint.clone(),
                provider,
            }))
            .with_no_client_auth(),
    };
    Arc::new(config)
}

/// An HTTPS GET of `path` at `address`, for server name `name`, with `token` as bearer token if
/// any: (status code, body); `Err` with why when the connection or the handshake fails (the
/// certificate not trusted, say).
pub fn https_get(
    address: SocketAddr,
    name: &str,
    trust: &Trust,
    path: &str,
    token: Option<&str>,
) -> Result<(u16, String), String> {
    let tcp = std::net::TcpStream::connect_timeout(&address, Duration::from_secs(10)).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let server_name = ServerName::try_from(name.to_owned()).map_err(|e| e.to_string())?;
    let connection = rustls::ClientConnection::new(client_config(trust), server_name).map_err(|e| e.to_string())?;
    let mut stream = rustls::StreamOwned::new(connection, tcp);
    let authorization = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {name}\r\n{authorization}Connection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    // A server that closes without close_notify ends the read with an error after the answer.
    if let Err(error) = stream.read_to_end(&mut response)
        && response.is_empty()
    {
        return Err(error.to_string());
    }
    let response = String::from_utf8_lossy(&response).into_owned();
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no HTTP answer: {response:?}"))?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((code, body))
}
