//! HTTPS for the HTTP API and the dashboard: a certificate chain and its private key, read
//! from PEM files, served with rustls (the ring provider, as hopper's other TLS; no
//! OpenSSL). Bearer tokens and basic-auth passwords cross the network in every request, so
//! off loopback `hopper serve --http` serves HTTPS, or plain HTTP only when told to (behind
//! a proxy that terminates TLS).
//!
//! Certificates are renewed under a running server (an ACME client, a secret mounted by
//! Kubernetes): [`Tls::reload`] reads the files again and, if they hold a usable pair,
//! serves it to the handshakes that follow; if not, it says why and keeps the pair it has.
//! `hopper serve` calls it on `SIGHUP`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

use crate::{Error, Result};

/// What the HTTP server presents to its clients. Cheap to clone; clones share the pair
/// served, so a [`Tls::reload`] on one reaches every connection's handshake.
#[derive(Clone)]
pub struct Tls {
    acceptor: TlsAcceptor,
    served: Arc<Served>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("files", &self.served.files)
            .finish()
    }
}

/// The pair each handshake is given, and the files it came from.
#[derive(Debug)]
struct Served {
    provider: Arc<CryptoProvider>,
    files: Option<(PathBuf, PathBuf)>,
    current: RwLock<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for Served {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        // A poisoned lock still holds a whole pair: a swap cannot be seen half done.
        let current = self.current.read().unwrap_or_else(|e| e.into_inner());
        Some(Arc::clone(&current))
    }
}

impl Tls {
    /// The certificate chain of the PEM file `cert` (the server's certificate first, then
    /// its intermediates) and the unencrypted private key of the PEM file `key` (PKCS#8,
    /// PKCS#1 or SEC1). A missing or unreadable file, one without a certificate or a key,
    /// or a key that is not the certificate's is refused, naming the file.
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<Self> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let pair = read_pair(&provider, cert, key)?;
        Self::serving(provider, pair, Some((cert.to_owned(), key.to_owned())))
    }

    /// `chain` (the server's certificate first) with its `key`; a key that is not the
    /// certificate's is refused. [`Tls::reload`] has no files to read then.
    pub fn new(chain: Vec<CertificateDer<'static>>, key: PrivateKeyDer<'static>) -> Result<Self> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let pair = certified(&provider, chain, key)?;
        Self::serving(provider, pair, None)
    }

    /// Reads the files given to [`Tls::from_pem_files`] again and serves what they hold from
    /// the next handshake on; connections already open keep theirs. Files that cannot be
    /// served (half written, a key of another certificate) are refused as at start, and
    /// the pair served before stays.
    pub fn reload(&self) -> Result<()> {
        let Some((cert, key)) = &self.served.files else {
            return Err(Error::Config(
                "this TLS pair was given in memory, not read from files".into(),
            ));
        };
        let pair = read_pair(&self.served.provider, cert, key)?;
        let mut current = self
            .served
            .current
            .write()
            .unwrap_or_else(|e| e.into_inner());
        *current = Arc::new(pair);
        Ok(())
    }

    fn serving(
        provider: Arc<CryptoProvider>,
        pair: CertifiedKey,
        files: Option<(PathBuf, PathBuf)>,
    ) -> Result<Self> {
        let served = Arc::new(Served {
            provider: Arc::clone(&provider),
            files,
            current: RwLock::new(Arc::new(pair)),
        });
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Config(format!("TLS: {e}")))?
            .with_no_client_auth()
            .with_cert_resolver(served.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Tls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            served,
        })
    }

    pub(crate) fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }
}

/// The pair of the files `cert` and `key`, checked (see [`Tls::from_pem_files`]).
fn read_pair(provider: &CryptoProvider, cert: &Path, key: &Path) -> Result<CertifiedKey> {
    let chain = hopper_pem::certificates(cert)
        .map_err(|e| Error::Config(format!("TLS certificate file {e}")))?;
    let private =
        hopper_pem::private_key(key).map_err(|e| Error::Config(format!("TLS key file {e}")))?;
    certified(provider, chain, private)
}

/// `chain` with `key`, refused if the key is not the first certificate's.
fn certified(
    provider: &CryptoProvider,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<CertifiedKey> {
    if chain.is_empty() {
        return Err(Error::Config("TLS: no certificate given".into()));
    }
    CertifiedKey::from_der(chain, key, provider)
        .map_err(|e| Error::Config(format!("TLS certificate and key: {e}")))
}
