//! The build without the `tls` feature: every connection in plaintext, and a connection
//! string that needs TLS refused when it is read (see [`super::mode::plaintext`]).

use super::conninfo::TlsParams;
use super::mode::{Mode, plaintext};

/// The connector of a build without TLS.
pub type Connector = tokio_postgres::NoTls;

/// The TLS settings of a connection string in a build without TLS: none but the mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsSettings {
    pub mode: Mode,
}

impl TlsSettings {
    /// Refuses what needs TLS (see [`plaintext`]).
    pub(crate) fn resolve(params: &TlsParams) -> Result<Self, String> {
        Ok(TlsSettings {
            mode: plaintext(params)?,
        })
    }

    /// The connector: none.
    pub(crate) fn connector(&self) -> Result<Connector, String> {
        Ok(tokio_postgres::NoTls)
    }
}

/// No failure is TLS's in a build without it.
pub(crate) fn explain(_: &tokio_postgres::Error, _: &TlsSettings) -> Option<String> {
    None
}
