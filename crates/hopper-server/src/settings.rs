//! What a server can run with: [`ServeConfig::check`], called by [`crate::Server::start`]
//! before anything is registered or bound, so that no setting panics one of its tasks or
//! makes it busy-loop. `hopper serve` checks its flags with the same rules.

use std::time::Duration;

use hopper_core::limits::{check_count, check_duration, check_interval};

use crate::{ServeConfig, ServeError};

/// The shortest heartbeat period a server announces (10 ms).
pub const MIN_HEARTBEAT: Duration = Duration::from_millis(10);

/// Checks a heartbeat period and a lease: a heartbeat of at least [`MIN_HEARTBEAT`], a lease
/// at least twice it (a worker renews it once a period), neither past ten years.
pub fn check_timing(heartbeat: Duration, lease: Duration) -> Result<(), String> {
    for (name, duration) in [("heartbeat", heartbeat), ("lease", lease)] {
        check_duration(name, duration).map_err(words)?;
    }
    if heartbeat < MIN_HEARTBEAT || lease < heartbeat * 2 {
        return Err(format!(
            "the heartbeat must be at least {MIN_HEARTBEAT:?} and the lease at least twice it (heartbeat {heartbeat:?}, lease {lease:?})"
        ));
    }
    Ok(())
}

impl ServeConfig {
    /// Refuses, with [`ServeError::Invalid`] naming the setting, what a server cannot run
    /// with: the heartbeat and lease of [`check_timing`]; a duration past
    /// [`hopper_core::limits::MAX_DURATION`] (ten years); a zero `poll_interval` or
    /// `handshake_timeout`; a `node_dead_after` under twice the heartbeat; a count past
    /// [`hopper_core::limits::MAX_COUNT`] (a million).
    pub fn check(&self) -> Result<(), ServeError> {
        check_timing(self.heartbeat, self.lease).map_err(ServeError::Invalid)?;
        let durations = [
            ("handshake_timeout", self.handshake_timeout),
            ("poll_interval", self.poll_interval),
            ("node_dead_after", self.node_dead_after),
            ("unplaceable_delay", self.unplaceable_delay),
        ];
        for (name, duration) in durations {
            check_duration(name, duration).map_err(invalid)?;
        }
        check_interval("poll_interval", self.poll_interval).map_err(invalid)?;
        check_interval("handshake_timeout", self.handshake_timeout).map_err(invalid)?;
        if self.node_dead_after < self.heartbeat * 2 {
            return Err(ServeError::Invalid(format!(
                "node_dead_after of {:?} is too short: at least twice the heartbeat ({:?})",
                self.node_dead_after, self.heartbeat
            )));
        }
        let counts = [
            ("pool_size", self.pool_size),
            ("max_connections", self.max_connections),
            ("claim_batch", self.claim_batch),
        ];
        for (name, count) in counts {
            check_count(name, count).map_err(invalid)?;
        }
        Ok(())
    }
}

/// A refused setting as the server's error.
fn invalid(e: hopper_core::Error) -> ServeError {
    ServeError::Invalid(words(e))
}

/// Why a check refused a setting, in its own words (without the error kind's prefix).
fn words(e: hopper_core::Error) -> String {
    match e {
        hopper_core::Error::InvalidInput(why) => why,
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hopper_core::limits::MAX_DURATION;

    #[test]
    fn timings_are_answered_however_large() {
        let ms = Duration::from_millis;
        assert!(check_timing(ms(10), ms(20)).is_ok());
        assert!(check_timing(ms(9), ms(20)).is_err());
        assert!(check_timing(ms(10), ms(19)).is_err());
        assert!(check_timing(Duration::MAX, Duration::MAX).is_err());
        assert!(
            check_timing(MAX_DURATION, MAX_DURATION).is_err(),
            "twice is past it"
        );
        assert!(check_timing(MAX_DURATION / 2, MAX_DURATION).is_ok());
    }
}
