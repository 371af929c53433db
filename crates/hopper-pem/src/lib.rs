//! # hopper-pem
//!
//! The one place hopper reads the PEM files of its TLS: the certificate and key that
//! `hopper serve --http` serves HTTPS with (`hopper-web`), the CA file and client
//! certificate of the OTLP exporters (`hopper`'s `otel` feature), and the `sslrootcert`,
//! `sslcert` and `sslkey` of PostgreSQL connections (`hopper-postgres`). The PEM parsing
//! is rustls-pki-types'; what this crate adds is an error ([`PemError`]) that names the
//! file and says what is wrong with it: it does not exist, it cannot be read, it is not
//! PEM, it holds no certificate, it holds no private key or only an encrypted one.
//!
//! ```no_run
//! use std::path::Path;
//!
//! # fn run() -> Result<(), hopper_pem::PemError> {
//! let chain = hopper_pem::certificates(Path::new("/etc/hopper/cert.pem"))?;
//! let key = hopper_pem::private_key(Path::new("/etc/hopper/key.pem"))?;
//! # let _ = (chain, key);
//! # Ok(()) }
//! ```
//!
//! Each caller puts its own words before the error (`TLS certificate file `,
//! `sslrootcert=`, `OTEL_EXPORTER_OTLP_CERTIFICATE=`), whose text starts with the path:
//! `sslrootcert=/etc/hopper/ca.pem: no such file`.
//!
//! A crate of its own because it is the lowest that all three can use: `hopper-core` does
//! no I/O, and the web side and the OTLP exporters must not depend on the PostgreSQL
//! backend to read a file.

use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};

use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// The largest file read, 16 MiB: a CA bundle of every public root is under 300 KB, so a
/// larger file is a mistake (a log, a disk image), refused before it is read whole.
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Why a PEM file could not be used. Its text starts with the file's path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PemError {
    /// The file does not exist.
    #[error("{}: no such file", .path.display())]
    Missing {
        /// The file.
        path: PathBuf,
    },
    /// The file exists and could not be read (no permission, a directory).
    #[error("{}: cannot be read: {cause}", .path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// What the system said.
        cause: std::io::Error,
    },
    /// The file is over [`MAX_FILE_BYTES`].
    #[error("{}: over {} MiB: not a certificate or key file", .path.display(), MAX_FILE_BYTES >> 20)]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// A PEM block of the file is malformed.
    #[error("{}: not valid PEM: {reason}", .path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The file holds no certificate.
    #[error("{}: no PEM certificate in it (a -----BEGIN CERTIFICATE----- block is expected)", .path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// The file holds no unencrypted private key.
    #[error(
        "{}: no PEM private key in it (an unencrypted PEM private key is expected: \
         PKCS#8, PKCS#1 or SEC1, -----BEGIN PRIVATE KEY-----, RSA PRIVATE KEY or EC PRIVATE KEY)",
        .path.display()
    )]
    NoKey {
        /// The file.
        path: PathBuf,
    },
    /// The file's private key is encrypted.
    #[error(
        "{}: the private key is encrypted, and hopper reads only unencrypted keys \
         (write one with `openssl pkey -in KEY -out PLAIN`, readable by its owner only)",
        .path.display()
    )]
    EncryptedKey {
        /// The file.
        path: PathBuf,
    },
}

impl PemError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            PemError::Missing { path }
            | PemError::Unreadable { path, .. }
            | PemError::TooLarge { path }
            | PemError::Malformed { path, .. }
            | PemError::NoCertificate { path }
            | PemError::NoKey { path }
            | PemError::EncryptedKey { path } => path,
        }
    }
}

/// Every certificate of the PEM file `path`, in order (a chain: the end entity first, then
/// its intermediates; or a bundle of CA certificates). Blocks of other kinds (a key, a
/// CRL) are skipped; a file with no certificate is refused.
pub fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, PemError> {
    let bytes = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| malformed(path, &e))?;
    if certs.is_empty() {
        return Err(PemError::NoCertificate {
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

/// The first private key of the PEM file `path` (PKCS#8, PKCS#1 or SEC1, unencrypted).
/// Blocks of other kinds (certificates) are skipped; a file with no key, or only an
/// encrypted one, is refused.
pub fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, PemError> {
    let bytes = read(path)?;
    match PrivateKeyDer::from_pem_slice(&bytes) {
        Ok(key) => Ok(key),
        Err(_) if encrypted(&bytes) => Err(PemError::EncryptedKey {
            path: path.to_owned(),
        }),
        Err(pem::Error::NoItemsFound) => Err(PemError::NoKey {
            path: path.to_owned(),
        }),
        Err(e) => Err(malformed(path, &e)),
    }
}

/// The whole file, up to [`MAX_FILE_BYTES`].
fn read(path: &Path) -> Result<Vec<u8>, PemError> {
    let unreadable = |cause: std::io::Error| match cause.kind() {
        ErrorKind::NotFound => PemError::Missing {
            path: path.to_owned(),
        },
        _ => PemError::Unreadable {
            path: path.to_owned(),
            cause,
        },
    };
    let file = File::open(path).map_err(unreadable)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(PemError::TooLarge {
            path: path.to_owned(),
        });
    }
    Ok(bytes)
}

/// Whether the file holds an encrypted private key: a PKCS#8 `ENCRYPTED PRIVATE KEY`
/// block, or OpenSSL's older encrypted PKCS#1 and SEC1 blocks (`Proc-Type: 4,ENCRYPTED`).
fn encrypted(bytes: &[u8]) -> bool {
    let contains = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    contains(b"-----BEGIN ENCRYPTED PRIVATE KEY-----") || contains(b"Proc-Type: 4,ENCRYPTED")
}

/// A malformed file, in words (pki-types shows the markers it quotes as byte arrays).
fn malformed(path: &Path, e: &pem::Error) -> PemError {
    let text = |bytes: &[u8]| {
        let line = String::from_utf8_lossy(bytes);
        let line = line.trim();
        match line.char_indices().nth(80) {
            Some((cut, _)) => format!("{}…", &line[..cut]),
            None => line.to_owned(),
        }
    };
    let reason = match e {
        pem::Error::MissingSectionEnd { end_marker } => {
            format!(
                "a block has no end line (-----END {}-----)",
                text(end_marker)
            )
        }
        pem::Error::IllegalSectionStart { line } => {
            format!("a malformed BEGIN line ({})", text(line))
        }
        pem::Error::Base64Decode(why) => format!("a block's base64 does not decode ({why})"),
        other => other.to_string(),
    };
    PemError::Malformed {
        path: path.to_owned(),
        reason,
    }
}

#[cfg(test)]
mod tests;
