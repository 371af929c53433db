//! What a server can run with: [`ServeConfig::check`], called by [`crate::Server::start`]
//! before anything is registered or bound, so that no setting panics one of its tasks or
//! makes it busy-loop. `hopper serve` checks its flags with the same rules.

use hopper_core::limits::{
    check_count, check_duration, check_interval, check_node_timeout, check_timing,
};

use crate::{ServeConfig, ServeError};

impl ServeConfig {
    /// Refuses, with [`ServeError::Invalid`] naming the setting, what a server cannot run
    /// with: the heartbeat and lease of [`check_timing`] (a heartbeat of at least 10 ms, a
    /// lease of twice that); a duration past [`hopper_core::limits::MAX_DURATION`] (ten
    /// years); a zero `poll_interval` or `handshake_timeout`; a `node_dead_after` under
    /// twice the heartbeat; a count past [`hopper_core::limits::MAX_COUNT`] (a million);
    /// `housekeeping` that [`hopper::maintenance::Housekeeping::check`] refuses.
    pub fn check(&self) -> Result<(), ServeError> {
        check_timing(self.heartbeat, self.lease).map_err(invalid)?;
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
        check_node_timeout(self.heartbeat, self.node_dead_after).map_err(invalid)?;
        let counts = [
            ("pool_size", self.pool_size),
            ("max_connections", self.max_connections),
            ("claim_batch", self.claim_batch),
        ];
        for (name, count) in counts {
            check_count(name, count).map_err(invalid)?;
        }
        self.housekeeping.check().map_err(invalid)
    }
}

/// A refused setting as the server's error, in the check's own words (without the error
/// kind's prefix).
fn invalid(e: hopper_core::Error) -> ServeError {
    match e {
        hopper_core::Error::InvalidInput(why) => ServeError::Invalid(why),
        other => ServeError::Invalid(other.to_string()),
    }
}
