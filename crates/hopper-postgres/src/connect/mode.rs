//! `sslmode` as libpq names it, and what a build without TLS support (no `tls` feature)
//! makes of a connection string.

use tokio_postgres::config::SslMode;

use super::conninfo::TlsParams;

/// How much of the server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl Mode {
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        match s {
            "disable" => Ok(Mode::Disable),
            "allow" | "prefer" => Ok(Mode::Prefer),
            "require" => Ok(Mode::Require),
            "verify-ca" => Ok(Mode::VerifyCa),
            "verify-full" => Ok(Mode::VerifyFull),
            other => Err(format!(
                "sslmode={other:?} is not one of disable, allow, prefer, require, verify-ca, verify-full"
            )),
        }
    }

    /// The name libpq gives it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Disable => "disable",
            Mode::Prefer => "prefer",
            Mode::Require => "require",
            Mode::VerifyCa => "verify-ca",
            Mode::VerifyFull => "verify-full",
        }
    }

    /// What tokio-postgres is told: whether to ask for TLS and whether to insist.
    pub(crate) fn driver_mode(self) -> SslMode {
        match self {
            Mode::Disable => SslMode::Disable,
            Mode::Prefer => SslMode::Prefer,
            Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
        }
    }
}

/// The `sslmode` of `params` in a build without TLS support, as libpq built without SSL
/// reads it: `disable`, `allow` and `prefer` connect in plaintext (returned as
/// [`Mode::Disable`]); `require`, `verify-ca` and `verify-full`, and the certificate
/// parameters, which mean nothing without TLS, are refused with the reason.
#[cfg_attr(
    feature = "tls",
    allow(dead_code, reason = "the build without `tls` uses it")
)]
pub(crate) fn plaintext(params: &TlsParams) -> Result<Mode, String> {
    let not_compiled =
        "TLS support is not compiled into this build of hopper (enable the `tls` cargo feature)";
    let mode = params
        .sslmode
        .as_deref()
        .map_or(Ok(Mode::Prefer), Mode::parse)?;
    if mode != Mode::Prefer && mode != Mode::Disable {
        return Err(format!(
            "sslmode={} needs TLS, and {not_compiled}; use sslmode=disable or prefer to connect in plaintext",
            mode.name()
        ));
    }
    let named = [
        ("sslrootcert", &params.sslrootcert),
        ("sslcert", &params.sslcert),
        ("sslkey", &params.sslkey),
    ];
    if let Some((key, _)) = named.iter().find(|(_, value)| value.is_some()) {
        return Err(format!(
            "{key} is a TLS parameter, and {not_compiled}; remove it to connect in plaintext"
        ));
    }
    Ok(Mode::Disable)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(sslmode: Option<&str>, sslrootcert: Option<&str>) -> TlsParams {
        TlsParams {
            sslmode: sslmode.map(str::to_owned),
            sslrootcert: sslrootcert.map(str::to_owned),
            ..TlsParams::default()
        }
    }

    #[test]
    fn without_tls_the_lax_modes_connect_in_plaintext() {
        for sslmode in [None, Some("disable"), Some("allow"), Some("prefer")] {
            assert_eq!(
                plaintext(&params(sslmode, None)),
                Ok(Mode::Disable),
                "{sslmode:?}"
            );
        }
    }

    #[test]
    fn without_tls_the_modes_that_insist_on_tls_are_refused() {
        for sslmode in ["require", "verify-ca", "verify-full"] {
            let err = plaintext(&params(Some(sslmode), None)).expect_err(sslmode);
            assert!(
                err.starts_with(&format!("sslmode={sslmode} needs TLS")),
                "{err}"
            );
            assert!(err.contains("`tls` cargo feature"), "{err}");
        }
        let err = plaintext(&params(Some("bogus"), None)).expect_err("bogus");
        assert!(err.contains("is not one of"), "{err}");
    }

    #[test]
    fn without_tls_certificate_parameters_are_refused() {
        let err = plaintext(&params(Some("prefer"), Some("/ca.pem"))).expect_err("sslrootcert");
        assert!(err.starts_with("sslrootcert is a TLS parameter"), "{err}");
        let key_only = TlsParams {
            sslkey: Some("/client.key".to_owned()),
            ..TlsParams::default()
        };
        let err = plaintext(&key_only).expect_err("sslkey");
        assert!(err.starts_with("sslkey is a TLS parameter"), "{err}");
    }
}
