//! HTTPS for the HTTP API and the dashboard: a certificate chain and its private key, read
//! from PEM files, served with rustls (the ring provider, as hopper's other TLS; no
//! OpenSSL). Bearer tokens and basic-auth passwords cross the network in every request, so
//! off loopback `hopper serve --http` serves HTTPS, or plain HTTP only when told to (behind
//! a proxy that terminates TLS).

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::{Error, Result};

/// What the HTTP server presents to its clients. Cheap to clone.
#[derive(Clone)]
pub struct Tls {
    acceptor: TlsAcceptor,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls")
    }
}

impl Tls {
    /// The certificate chain of the PEM file `cert` (the server's certificate first, then
    /// its intermediates) and the unencrypted private key of the PEM file `key` (PKCS#8,
    /// PKCS#1 or SEC1). A missing or unreadable file, one without a certificate or a key,
    /// or a key that is not the certificate's is refused, naming the file.
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<Self> {
        let refused = |path: &Path, why: &dyn std::fmt::Display| {
            Error::Config(format!("TLS file {}: {why}", path.display()))
        };
        let chain = CertificateDer::pem_file_iter(cert)
            .and_then(Iterator::collect::<std::result::Result<Vec<_>, _>>)
            .map_err(|e| refused(cert, &e))?;
        if chain.is_empty() {
            return Err(refused(cert, &"no PEM certificate in it"));
        }
        let private = PrivateKeyDer::from_pem_file(key)
            .map_err(|e| refused(key, &format!("{e} (an unencrypted PEM private key)")))?;
        Self::new(chain, private)
    }

    /// `chain` (the server's certificate first) with its `key`; a key that is not the
    /// certificate's is refused.
    pub fn new(chain: Vec<CertificateDer<'static>>, key: PrivateKeyDer<'static>) -> Result<Self> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .and_then(|builder| builder.with_no_client_auth().with_single_cert(chain, key))
            .map_err(|e| Error::Config(format!("TLS certificate and key: {e}")))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Tls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }

    pub(crate) fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }
}
