//! In-process wake-ups.
//!
//! SQLite has no LISTEN/NOTIFY. Every write this backend makes that readies jobs (insert,
//! retry, promotion, rescue, release) or cancels one is announced on a
//! `tokio::sync::broadcast` channel shared by every clone of the backend, so runtimes in
//! the same process wake at once. Writes made by other processes on the same file are not
//! seen here: those are picked up by the runtime's polling (`poll_interval`, 1 s by
//! default), and a cancelled job's handler in another process learns of it at its next
//! lease renewal, when the renewal is refused.

use futures_util::StreamExt;
use hopper_core::{Wakeup, WakeupStream};
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;

/// How many wake-ups a slow subscriber may fall behind before it gets a
/// [`Wakeup::Resync`] instead of the ones it missed.
const CAPACITY: usize = 1024;

/// A new channel.
pub fn channel() -> broadcast::Sender<Wakeup> {
    broadcast::channel(CAPACITY).0
}

/// Sends `wakeup` to every subscriber (none is fine).
pub fn send(tx: &broadcast::Sender<Wakeup>, wakeup: Wakeup) {
    let _ = tx.send(wakeup);
}

/// Sends one [`Wakeup::Jobs`] per distinct queue.
pub fn send_queues<'a>(tx: &broadcast::Sender<Wakeup>, queues: impl IntoIterator<Item = &'a str>) {
    let mut seen: Vec<&str> = Vec::new();
    for queue in queues {
        if !seen.contains(&queue) {
            seen.push(queue);
            send(tx, Wakeup::Jobs(queue.to_owned()));
        }
    }
}

/// A stream of this process's wake-ups. A subscriber that fell behind gets
/// [`Wakeup::Resync`] and then the newest ones.
pub fn subscribe(tx: &broadcast::Sender<Wakeup>) -> WakeupStream {
    futures_util::stream::unfold(tx.subscribe(), |mut rx| async move {
        match rx.recv().await {
            Ok(wakeup) => Some((wakeup, rx)),
            Err(RecvError::Lagged(_)) => Some((Wakeup::Resync, rx)),
            Err(RecvError::Closed) => None,
        }
    })
    .boxed()
}
