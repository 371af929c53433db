//! Who can reach an endpoint, and the rule that follows: plaintext only where no other host
//! can listen in (loopback TCP, `ipc://`, `inproc://`), unless asked for explicitly.

use std::net::IpAddr;

use crate::ServeConfig;

/// True when only this host can reach `endpoint`: `tcp://` on a loopback address or
/// `localhost`, or a local transport (`ipc://`, `inproc://`).
pub fn is_loopback(endpoint: &str) -> bool {
    let Some(address) = endpoint.strip_prefix("tcp://") else {
        return endpoint.starts_with("ipc://") || endpoint.starts_with("inproc://");
    };
    // host:port, [v6]:port; a `source;` prefix names the local side, not the listener.
    let host = match address.rsplit_once(':') {
        Some((host, _port)) => host,
        None => address,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Refuses plaintext on an endpoint that other hosts can reach, unless
/// [`ServeConfig::insecure_plaintext`].
pub(crate) fn check(config: &ServeConfig) -> Result<(), String> {
    if config.curve.is_none() && !config.insecure_plaintext && !is_loopback(&config.listen) {
        return Err(
            "other hosts can reach this endpoint: give the server a CURVE key pair (the default \
             of `hopper serve` off loopback) or allow plaintext explicitly (--insecure-plaintext)"
                .to_owned(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_and_local_transports_count_as_private() {
        for private in [
            "tcp://127.0.0.1:7010",
            "tcp://127.0.0.2:0",
            "tcp://localhost:7010",
            "tcp://[::1]:7010",
            "ipc:///tmp/hopper.sock",
            "inproc://hopper",
        ] {
            assert!(is_loopback(private), "{private}");
        }
        for exposed in [
            "tcp://0.0.0.0:7010",
            "tcp://*:7010",
            "tcp://[::]:7010",
            "tcp://10.0.0.5:7010",
            "tcp://eth0:7010",
            "tcp://example.com:7010",
        ] {
            assert!(!is_loopback(exposed), "{exposed}");
        }
    }
}
