//! LISTEN/NOTIFY wake-ups on a dedicated connection, re-established when it drops.
//!
//! Notifications sent while the connection was down are lost, so after every reconnect the
//! stream yields [`Wakeup::Resync`] and the runtime re-polls.
//!
//! A `q:<queue>` payload says a queue's settings changed (paused, resumed, limited,
//! grouped): the listener calls its `on_settings` hook (which marks the settings cache
//! stale) and yields [`Wakeup::Jobs`] for the queue, so a resumed queue is claimed at once.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use hopper_core::error::with_causes;
use hopper_core::{Error, Result, Wakeup, WakeupStream};
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::{AsyncMessage, Client};

use crate::PgConnectOptions;

/// Called when a queue's settings changed.
pub type OnSettings = Arc<dyn Fn() + Send + Sync>;

/// Parses a payload of the wake channel: `a:<queue>`, `q:<queue>` or `c:<job id>`.
fn parse(payload: &str) -> Option<Wakeup> {
    let (tag, rest) = payload.split_once(':')?;
    match tag {
        "a" | "q" => Some(Wakeup::Jobs(rest.to_owned())),
        "c" => rest.parse().ok().map(Wakeup::Cancelled),
        _ => None,
    }
}

/// Starts listening on `channel`. The first connection is made before returning, so a bad
/// URL is reported here; later losses are retried in the background with backoff.
pub async fn subscribe(
    config: PgConnectOptions,
    channel: String,
    on_settings: OnSettings,
) -> Result<WakeupStream> {
    let (tx, rx) = mpsc::channel(1024);
    let first = listen_once(&config, &channel, tx.clone(), on_settings.clone()).await?;
    tokio::spawn(async move {
        // Holding the client keeps the session (and its LISTEN) open.
        let (mut _client, mut ended) = first;
        let mut backoff = Duration::from_millis(100);
        loop {
            let why = tokio::select! {
                _ = tx.closed() => return,
                why = &mut ended => why.unwrap_or_else(|_| "the connection ended".to_owned()),
            };
            tracing::warn!(channel, reason = %why, "notification connection lost; reconnecting");
            loop {
                tokio::select! {
                    _ = tx.closed() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                match listen_once(&config, &channel, tx.clone(), on_settings.clone()).await {
                    Ok((client, next)) => {
                        _client = client;
                        ended = next;
                        backoff = Duration::from_millis(100);
                        // Settings may have changed while nobody listened.
                        on_settings();
                        let _ = tx.send(Wakeup::Resync).await;
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(channel, error = %e.with_causes(), "reconnecting the notification listener failed");
                        backoff = (backoff * 2).min(Duration::from_secs(5));
                    }
                }
            }
        }
    });
    let stream =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|w| (w, rx)) });
    Ok(stream.boxed())
}

/// Opens one listening connection: the client, and a receiver that resolves when the
/// connection ends, with why.
async fn listen_once(
    config: &PgConnectOptions,
    channel: &str,
    tx: mpsc::Sender<Wakeup>,
    on_settings: OnSettings,
) -> Result<(Client, oneshot::Receiver<String>)> {
    let (client, mut connection) = config.connect_raw().await?;
    let (ended_tx, ended_rx) = oneshot::channel();
    let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
    tokio::spawn(async move {
        let mut why = "the server closed the connection".to_owned();
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    if n.payload().starts_with("q:") {
                        on_settings();
                    }
                    if let Some(wakeup) = parse(n.payload())
                        && tx.send(wakeup).await.is_err()
                    {
                        break;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    why = with_causes(&e);
                    break;
                }
            }
        }
        let _ = ended_tx.send(why);
    });
    client
        .batch_execute(&format!("LISTEN \"{channel}\""))
        .await
        .map_err(Error::database)?;
    Ok((client, ended_rx))
}
