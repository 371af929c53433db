//! libpq's TLS settings turned into a rustls client configuration.
//!
//! | `sslmode` | encrypted | chain checked | host name checked |
//! | --- | --- | --- | --- |
//! | `disable` | no | | |
//! | `prefer` (default), `allow` | if the server accepts | if a root certificate is given | no |
//! | `require` | yes | if a root certificate is given | no |
//! | `verify-ca` | yes | yes | no |
//! | `verify-full` | yes | yes | yes |
//!
//! The root certificate is `sslrootcert` (a PEM file, or `system` for the system's roots,
//! which implies and requires `verify-full`), else `~/.postgresql/root.crt` if it exists,
//! as libpq does. The client certificate is `sslcert` + `sslkey`, else
//! `~/.postgresql/postgresql.crt` + `.key` if they exist. `allow` is read as `prefer`: both
//! connect to every server either accepts, `prefer` encrypted where it can.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::conninfo::TlsParams;
use super::mode::Mode;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

/// The connector of a build with TLS.
pub type Connector = tokio_postgres_rustls::MakeRustlsConnect;

/// Where the trusted roots come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Roots {
    File(PathBuf),
    System,
}

impl std::fmt::Display for Roots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Roots::File(path) => write!(f, "sslrootcert={}", path.display()),
            Roots::System => f.write_str("sslrootcert=system"),
        }
    }
}

/// The TLS settings of one connection string, resolved (defaults applied, files found).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsSettings {
    pub mode: Mode,
    pub roots: Option<Roots>,
    /// Client certificate chain and key files.
    pub client: Option<(PathBuf, PathBuf)>,
}

/// `~/.postgresql/NAME`, where libpq looks when no file is named.
fn default_file(name: &str) -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    let path = Path::new(&home).join(".postgresql").join(name);
    path.exists().then_some(path)
}

impl TlsSettings {
    /// Applies libpq's defaults to the parameters of a connection string.
    pub(crate) fn resolve(params: &TlsParams) -> Result<Self, String> {
        let system = params.sslrootcert.as_deref() == Some("system");
        let mode = match (&params.sslmode, system) {
            (Some(mode), _) => Mode::parse(mode)?,
            (None, true) => Mode::VerifyFull,
            (None, false) => Mode::Prefer,
        };
        if mode == Mode::Disable {
            return Ok(TlsSettings {
                mode,
                roots: None,
                client: None,
            });
        }
        if system && mode != Mode::VerifyFull {
            return Err(format!(
                "sslrootcert=system needs sslmode=verify-full (it is {}), as in libpq: the system's roots vouch for host names",
                mode.name()
            ));
        }
        let roots = match params.sslrootcert.as_deref() {
            Some("system") => Some(Roots::System),
            Some(path) => Some(Roots::File(PathBuf::from(path))),
            None => default_file("root.crt").map(Roots::File),
        };
        if roots.is_none() && matches!(mode, Mode::VerifyCa | Mode::VerifyFull) {
            return Err(format!(
                "sslmode={} needs a root certificate to check the server against: give sslrootcert=/path/to/ca.pem, or sslrootcert=system for the system's roots (~/.postgresql/root.crt does not exist)",
                mode.name()
            ));
        }
        let client = match (&params.sslcert, &params.sslkey) {
            (Some(cert), Some(key)) => Some((PathBuf::from(cert), PathBuf::from(key))),
            (Some(cert), None) => Some((
                PathBuf::from(cert),
                default_file("postgresql.key").ok_or_else(|| {
                    format!("sslcert={cert} is given but no sslkey (and ~/.postgresql/postgresql.key does not exist)")
                })?,
            )),
            (None, Some(key)) => {
                return Err(format!(
                    "sslkey={key} is given but no sslcert: a client certificate needs both"
                ));
            }
            (None, None) => default_file("postgresql.crt")
                .and_then(|cert| default_file("postgresql.key").map(|key| (cert, key))),
        };
        Ok(TlsSettings {
            mode,
            roots,
            client,
        })
    }

    /// The connector these settings call for (see [`TlsSettings::client_config`]).
    pub(crate) fn connector(&self) -> Result<Connector, String> {
        Ok(Connector::new(self.client_config()?))
    }

    /// The rustls configuration these settings call for. Reads the certificate and key
    /// files now, so a missing or unreadable one is reported before any connection.
    pub(crate) fn client_config(&self) -> Result<ClientConfig, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?;
        let algorithms = provider.signature_verification_algorithms;
        let verifier: Arc<dyn ServerCertVerifier> = match (&self.roots, self.mode) {
            (None, _) | (_, Mode::Disable) => Arc::new(LaxVerifier {
                algorithms,
                chain: Chain::Unchecked,
            }),
            (Some(roots), mode) => {
                let webpki = WebPkiServerVerifier::builder_with_provider(
                    Arc::new(load_roots(roots)?),
                    provider.clone(),
                )
                .build()
                .map_err(|e| format!("{roots}: {e}"))?;
                if mode == Mode::VerifyFull {
                    webpki
                } else {
                    Arc::new(LaxVerifier {
                        algorithms,
                        chain: Chain::ToRoot(webpki),
                    })
                }
            }
        };
        let builder = builder
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        match &self.client {
            None => Ok(builder.with_no_client_auth()),
            Some((cert, key)) => builder
                .with_client_auth_cert(
                    hopper_pem::certificates(cert).map_err(|e| format!("sslcert={e}"))?,
                    hopper_pem::private_key(key).map_err(|e| format!("sslkey={e}"))?,
                )
                .map_err(|e| {
                    format!(
                        "sslcert={} and sslkey={}: {e}",
                        cert.display(),
                        key.display()
                    )
                }),
        }
    }
}

fn load_roots(roots: &Roots) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    match roots {
        Roots::File(path) => {
            let certs = hopper_pem::certificates(path).map_err(|e| format!("sslrootcert={e}"))?;
            for cert in certs {
                store
                    .add(cert)
                    .map_err(|e| format!("sslrootcert={}: {e}", path.display()))?;
            }
        }
        Roots::System => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                let why: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
                return Err(format!(
                    "sslrootcert=system: no root certificate found on this system{}",
                    if why.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", why.join("; "))
                    }
                ));
            }
        }
    }
    Ok(store)
}

/// The server certificate check of `prefer`, `require` and `verify-ca`. The handshake's
/// signatures are always checked (with the provider's algorithms, as WebPKI checks them);
/// what differs is how much of the certificate is.
#[derive(Debug)]
struct LaxVerifier {
    algorithms: WebPkiSupportedAlgorithms,
    chain: Chain,
}

/// How much of the server's certificate a [`LaxVerifier`] checks.
#[derive(Debug)]
enum Chain {
    /// `prefer` and `require` without a root certificate: anyone's certificate is accepted
    /// (libpq's behaviour: the traffic is encrypted, which protects from passive
    /// eavesdropping only).
    Unchecked,
    /// `verify-ca`: the chain must lead to a trusted root; the host name is not compared.
    /// The WebPKI verifier checks the chain first and the name last, so a name mismatch
    /// (and only that) is forgiven.
    ToRoot(Arc<WebPkiServerVerifier>),
}

impl ServerCertVerifier for LaxVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Chain::ToRoot(webpki) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// A sentence for a failed connection whose cause is TLS, or `None` when it is not.
pub(crate) fn explain(e: &tokio_postgres::Error, settings: &TlsSettings) -> Option<String> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(current) = cause {
        if let Some(tls) = current
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(explain_rustls(tls, settings));
        }
        if current.to_string() == "server does not support TLS" {
            return Some(format!(
                "the server does not accept TLS connections, and sslmode={} insists on TLS (turn `ssl = on` in postgresql.conf, or lower sslmode)",
                settings.mode.name()
            ));
        }
        cause = current.source();
    }
    None
}

fn explain_rustls(e: &rustls::Error, settings: &TlsSettings) -> String {
    let roots = settings
        .roots
        .as_ref()
        .map_or_else(|| "no root certificate".to_owned(), ToString::to_string);
    let why = match e {
        rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer | CertificateError::BadSignature,
        ) => format!(
            "the server's certificate is not signed by a trusted root ({roots}); is sslrootcert the CA that signed the server's certificate?"
        ),
        rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext {
            expected,
            presented,
        }) => format!(
            "the server's certificate is not valid for the host name {:?} (it names {}); sslmode=verify-full checks the host name, verify-ca only the chain",
            expected.to_str(),
            presented.join(", ")
        ),
        rustls::Error::InvalidCertificate(CertificateError::NotValidForName) => {
            "the server's certificate is not valid for the host name connected to; sslmode=verify-full checks the host name, verify-ca only the chain".to_owned()
        }
        rustls::Error::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        ) => "the server's certificate has expired".to_owned(),
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. },
        ) => "the server's certificate is not valid yet (is this machine's clock right?)".to_owned(),
        rustls::Error::AlertReceived(alert) => format!(
            "the server ended the TLS handshake ({alert:?}){}",
            if settings.client.is_none() {
                "; if it asks for a client certificate, give sslcert and sslkey"
            } else {
                "; does it trust the CA of sslcert?"
            }
        ),
        other => other.to_string(),
    };
    format!(
        "TLS handshake failed (sslmode={}): {why} [{e}]",
        settings.mode.name()
    )
}
