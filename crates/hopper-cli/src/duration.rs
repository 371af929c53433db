//! Durations on the command line (`10s`, `5m`, `1h30m`, `250ms`) and the checks made on
//! them, so that no value a user can type makes the binary panic.

use std::time::Duration;

use anyhow::Context;

/// Parses `text`, the value of `flag`, as a duration such as `10s`, `5m` or `1h30m`.
pub fn parse_duration(flag: &str, text: &str) -> anyhow::Result<Duration> {
    humantime::parse_duration(text)
        .with_context(|| format!("{flag} {text:?} is not a duration such as 10s, 5m or 1h30m"))
}

/// Checks `hopper serve`'s `--heartbeat` and `--lease` as the server does
/// ([`hopper_core::limits::check_timing`]), before anything connects. Any pair is
/// answered, however large (no overflow).
pub fn check_serve_timing(heartbeat: Duration, lease: Duration) -> anyhow::Result<()> {
    hopper_core::limits::check_timing(heartbeat, lease).map_err(|e| match e {
        hopper_core::Error::InvalidInput(why) => anyhow::anyhow!("--heartbeat and --lease: {why}"),
        other => other.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_or_say_what_was_expected() -> anyhow::Result<()> {
        assert_eq!(
            parse_duration("--delay", "1h30m")?,
            Duration::from_secs(5400)
        );
        assert_eq!(
            parse_duration("--delay", "250ms")?,
            Duration::from_millis(250)
        );
        let err = parse_duration("--delay", "soon").expect_err("refused");
        assert!(err.to_string().contains("--delay \"soon\""), "{err}");
        Ok(())
    }

    /// Found by the `cli_duration` fuzz target: `--heartbeat 300000000000y` made
    /// `heartbeat * 2` overflow and the binary panic.
    #[test]
    fn huge_heartbeats_are_refused_not_a_panic() -> anyhow::Result<()> {
        let huge = parse_duration("--heartbeat", "300000000000y")?;
        assert!(check_serve_timing(huge, huge).is_err());
        assert!(check_serve_timing(Duration::MAX, Duration::MAX).is_err());
        check_serve_timing(Duration::from_secs(5), Duration::from_secs(30))?;
        assert!(check_serve_timing(Duration::from_millis(5), Duration::from_secs(30)).is_err());
        assert!(check_serve_timing(Duration::from_secs(5), Duration::from_secs(9)).is_err());
        Ok(())
    }
}
