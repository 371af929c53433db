//! Durations on the command line (`10s`, `5m`, `1h30m`, `250ms`) and the checks made on
//! them, so that no value a user can type makes the binary panic.

use std::time::Duration;

use anyhow::Context;

/// Parses `text`, the value of `flag`, as a duration such as `10s`, `5m` or `1h30m`.
pub fn parse_duration(flag: &str, text: &str) -> anyhow::Result<Duration> {
    humantime::parse_duration(text)
        .with_context(|| format!("{flag} {text:?} is not a duration such as 10s, 5m or 1h30m"))
}

/// Checks `hopper serve`'s `--heartbeat`, `--lease` and `--node-dead-after` as the server
/// does ([`hopper_core::limits::check_timing`] and
/// [`hopper_core::limits::check_node_timeout`]), before anything connects, naming the
/// flags. Any values are answered, however large (no overflow).
pub fn check_serve_timing(
    heartbeat: Duration,
    lease: Duration,
    node_dead_after: Duration,
) -> anyhow::Result<()> {
    let flags = |flags: &str, e: hopper_core::Error| match e {
        hopper_core::Error::InvalidInput(why) => anyhow::anyhow!("{flags}: {why}"),
        other => other.into(),
    };
    hopper_core::limits::check_timing(heartbeat, lease)
        .map_err(|e| flags("--heartbeat and --lease", e))?;
    hopper_core::limits::check_node_timeout(heartbeat, node_dead_after)
        .map_err(|e| flags("--node-dead-after and --heartbeat", e))
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
        let s = Duration::from_secs;
        assert!(check_serve_timing(huge, huge, huge).is_err());
        assert!(check_serve_timing(Duration::MAX, Duration::MAX, Duration::MAX).is_err());
        check_serve_timing(s(5), s(30), s(30))?;
        check_serve_timing(s(5), s(30), s(10))?;
        assert!(check_serve_timing(Duration::from_millis(5), s(30), s(30)).is_err());
        assert!(check_serve_timing(s(5), s(9), s(30)).is_err());
        let err = check_serve_timing(s(20), s(60), s(30)).expect_err("refused");
        assert!(err.to_string().starts_with("--node-dead-after"), "{err}");
        assert!(check_serve_timing(s(5), s(30), Duration::MAX).is_err());
        Ok(())
    }
}
