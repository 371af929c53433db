//! The HTTP client of the OTLP exporters: reqwest's blocking client over rustls (the ring
//! provider, as the PostgreSQL connections use; no OpenSSL), trusting the CA file of
//! `OTEL_EXPORTER_OTLP_CERTIFICATE` (or the signal's own variable) or else the system's
//! roots, presenting a client certificate when `OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE` and
//! `OTEL_EXPORTER_OTLP_CLIENT_KEY` name one, and logging why an export failed (the
//! exporter itself only says "network error").

use std::path::Path;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use hopper_core::error::with_causes;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};

/// How long one export may take when `OTEL_EXPORTER_OTLP_TIMEOUT` does not say (the
/// specification's default).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The exporters' HTTP client for `signal` (`TRACES`, `METRICS`), configured from the
/// environment through `var`.
pub(super) fn client(
    signal: &str,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Transport, String> {
    // The signal's own variable first, as the specification orders them.
    let setting = |name: &str| {
        var(&format!("OTEL_EXPORTER_OTLP_{signal}_{name}"))
            .map(|v| (format!("OTEL_EXPORTER_OTLP_{signal}_{name}"), v))
            .or_else(|| {
                var(&format!("OTEL_EXPORTER_OTLP_{name}"))
                    .map(|v| (format!("OTEL_EXPORTER_OTLP_{name}"), v))
            })
    };
    let timeout = match setting("TIMEOUT") {
        None => DEFAULT_TIMEOUT,
        Some((name, ms)) => ms
            .trim()
            .parse()
            .map(Duration::from_millis)
            .map_err(|_| format!("{name}={ms:?} is not a number of milliseconds"))?,
    };
    let roots = match setting("CERTIFICATE") {
        Some((name, path)) => file_roots(&name, Path::new(&path))?,
        None => system_roots(),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots);
    let tls = match (setting("CLIENT_CERTIFICATE"), setting("CLIENT_KEY")) {
        (None, None) => builder.with_no_client_auth(),
        (Some((cert_var, cert)), Some((key_var, key))) => {
            let chain = certificates(&cert_var, Path::new(&cert))?;
            let key =
                hopper_pem::private_key(Path::new(&key)).map_err(|e| format!("{key_var}={e}"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("{cert_var} and {key_var}: {e}"))?
        }
        (Some((name, _)), None) | (None, Some((name, _))) => {
            return Err(format!(
                "{name} is set without its pair: a client certificate needs both \
                 OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY"
            ));
        }
    };
    // reqwest's blocking client starts a runtime of its own and must not be built on a
    // thread that runs one (the application's, when it sets up telemetry in `main`).
    let built = std::thread::spawn(move || {
        reqwest::blocking::Client::builder()
            .timeout(timeout)
            .tls_backend_preconfigured(tls)
            .build()
    })
    .join()
    .map_err(|_| "building the HTTP client panicked".to_owned())?
    .map_err(|e| format!("building the HTTP client: {}", with_causes(&e)))?;
    Ok(Transport {
        client: built,
        last_error: Arc::new(Mutex::new(None)),
    })
}

/// The CA certificates of a PEM file, as the only roots trusted.
fn file_roots(var: &str, path: &Path) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(var, path)? {
        roots
            .add(cert)
            .map_err(|e| format!("{var}={}: {e}", path.display()))?;
    }
    Ok(roots)
}

/// The system's roots (none found: only a CA file would do, and the handshake says so),
/// read once per process: the traces' and metrics' exporters both need them, and reading
/// them twice cost each `hopper` command a fifth of its CPU (15 ms against 12 ms).
fn system_roots() -> RootCertStore {
    static ROOTS: LazyLock<RootCertStore> = LazyLock::new(|| {
        let mut roots = RootCertStore::empty();
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        roots
    });
    ROOTS.clone()
}

/// Every certificate of the PEM file `path` named by the variable `var`, refusing a
/// missing, unreadable or empty one in `VAR=PATH: why`.
fn certificates(var: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    hopper_pem::certificates(path).map_err(|e| format!("{var}={e}"))
}

/// The HTTP client handed to the exporters: reqwest's, logging each new reason of failure
/// once (at `warn`, target `hopper::otel`) rather than once per retry or batch.
#[derive(Debug, Clone)]
pub(super) struct Transport {
    client: reqwest::blocking::Client,
    last_error: Arc<Mutex<Option<String>>>,
}

#[async_trait]
impl HttpClient for Transport {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let url = request.uri().to_string();
        let result = self.client.send_bytes(request).await;
        let mut last = self
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match result {
            Ok(response) => {
                if last.take().is_some() {
                    tracing::info!(target: "hopper::otel", %url, "exporting to the OTLP collector works again");
                }
                Ok(response)
            }
            Err(e) => {
                let why = with_causes(&*e);
                if last.as_deref() != Some(why.as_str()) {
                    tracing::warn!(target: "hopper::otel", %url, error = %why, "OpenTelemetry export failed");
                    *last = Some(why.clone());
                }
                Err(why.into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otel::test_vars as vars;

    fn refusal(pairs: &[(&str, &str)]) -> String {
        match client("TRACES", &vars(pairs)) {
            Ok(_) => panic!("{pairs:?} was accepted"),
            Err(e) => e,
        }
    }

    #[test]
    fn bad_settings_are_refused_naming_the_variable() {
        let missing = refusal(&[("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem")]);
        assert!(
            missing.starts_with("OTEL_EXPORTER_OTLP_CERTIFICATE=/nonexistent/ca.pem: "),
            "{missing}"
        );
        // The signal's own variable is read first.
        let signal = refusal(&[
            (
                "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
                "/nonexistent/traces.pem",
            ),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem"),
        ]);
        assert!(
            signal.contains("TRACES_CERTIFICATE=/nonexistent/traces.pem"),
            "{signal}"
        );
        let half = refusal(&[("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/k.pem")]);
        assert!(half.contains("without its pair"), "{half}");
        let timeout = refusal(&[("OTEL_EXPORTER_OTLP_TIMEOUT", "soon")]);
        assert!(
            timeout.contains("not a number of milliseconds"),
            "{timeout}"
        );
    }

    #[test]
    fn a_client_key_file_without_a_key_is_refused_naming_the_variable() {
        let key = rcgen::KeyPair::generate().expect("a key pair");
        let cert = rcgen::CertificateParams::new(vec!["client.test".to_owned()])
            .and_then(|params| params.self_signed(&key))
            .expect("a certificate");
        let path =
            std::env::temp_dir().join(format!("hopper-otel-client-{}.pem", std::process::id()));
        std::fs::write(&path, cert.pem()).expect("a temporary file");
        let path_text = path.display().to_string();
        // The certificate given as the key too.
        let refused = refusal(&[
            ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", path_text.as_str()),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", path_text.as_str()),
        ]);
        let _ = std::fs::remove_file(&path);
        let lacks = format!("OTEL_EXPORTER_OTLP_CLIENT_KEY={path_text}: no PEM private key in it");
        assert!(refused.starts_with(&lacks), "{refused}");
    }

    #[test]
    fn a_file_without_a_certificate_is_refused() {
        let path = std::env::temp_dir().join(format!("hopper-otel-{}.pem", std::process::id()));
        std::fs::write(&path, "not a certificate\n").expect("a temporary file");
        let path_text = path.display().to_string();
        let empty = refusal(&[("OTEL_EXPORTER_OTLP_CERTIFICATE", path_text.as_str())]);
        let _ = std::fs::remove_file(&path);
        assert!(empty.contains("no PEM certificate"), "{empty}");
        assert!(client("TRACES", &vars(&[])).is_ok(), "the system's roots");
    }
}
