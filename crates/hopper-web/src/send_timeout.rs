//! A bound on how long a connection's writes may wait for its peer.
//!
//! hyper bounds how long a request's headers take, but once a response is being written it
//! waits for the socket as long as the peer likes: a peer that asks for responses (the
//! dashboard's files need no token) and never reads them fills its socket's buffers, and
//! hyper then waits on the full socket for ever, holding the connection, its task and its
//! place under [`crate::ConnectionLimits::max_connections`]. Enough such peers lock every
//! other client out.
//!
//! [`SendTimeout`] wraps the peer's stream (under TLS, when there is TLS): a write, flush
//! or shutdown that has made no progress for [`crate::ConnectionLimits::send_timeout`]
//! fails with [`std::io::ErrorKind::TimedOut`], and hyper closes the connection. The clock
//! runs only while a write waits, and starts again at every byte the peer takes, so a
//! slow but reading client is never cut, however large the response; one that reads a
//! little now and then must still drain a good part of the socket's buffer each time
//! before the kernel lets a write go on.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// The error of a write that waited past the timeout.
#[derive(Debug, thiserror::Error)]
#[error("the peer took none of its response for {0:?}")]
pub(crate) struct Stalled(Duration);

/// True when `error`, or an error it wraps, is a [`Stalled`] write.
pub(crate) fn is_stalled(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(error);
    while let Some(e) = source {
        if e.is::<Stalled>() {
            return true;
        }
        if let Some(io) = e.downcast_ref::<io::Error>()
            && io.get_ref().is_some_and(|inner| inner.is::<Stalled>())
        {
            return true;
        }
        source = e.source();
    }
    false
}

/// `S`, whose writes fail once they have waited `timeout` without progress.
#[derive(Debug)]
pub(crate) struct SendTimeout<S> {
    inner: S,
    timeout: Duration,
    /// Armed when a write first waits; dropped at the next one that makes progress.
    waiting: Option<Pin<Box<Sleep>>>,
}

impl<S> SendTimeout<S> {
    /// `inner`, its writes bounded by `timeout`.
    pub(crate) fn new(inner: S, timeout: Duration) -> Self {
        SendTimeout {
            inner,
            timeout,
            waiting: None,
        }
    }

    /// Passes on a write's result; while it waits, fails it once the timeout is past.
    fn bounded<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if let Poll::Ready(result) = polled {
            self.waiting = None;
            return Poll::Ready(result);
        }
        let timeout = self.timeout;
        let waiting = self
            .waiting
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        ready!(waiting.as_mut().poll(cx));
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            Stalled(timeout),
        )))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for SendTimeout<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for SendTimeout<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.bounded(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.bounded(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.bounded(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.bounded(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test(start_paused = true)]
    async fn a_write_the_peer_never_takes_fails_at_the_timeout() {
        // A pipe with room for 4 bytes whose other end is never read.
        let (near, _far) = tokio::io::duplex(4);
        let mut bounded = SendTimeout::new(near, Duration::from_secs(5));
        let written = bounded.write_all(b"more than four bytes").await;
        let error = written.err();
        assert_eq!(
            error.as_ref().map(io::Error::kind),
            Some(io::ErrorKind::TimedOut),
            "{error:?}"
        );
        assert!(error.as_ref().is_some_and(|e| is_stalled(e)), "{error:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_that_keeps_reading_is_never_cut() {
        use tokio::io::AsyncReadExt;
        let (near, mut far) = tokio::io::duplex(4);
        let mut bounded = SendTimeout::new(near, Duration::from_secs(5));
        // The reader takes 4 bytes every 4 s: the whole write takes far longer than the
        // timeout, but never waits that long at once.
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut buf = [0u8; 4];
            loop {
                tokio::time::sleep(Duration::from_secs(4)).await;
                match far.read(&mut buf).await {
                    Ok(0) | Err(_) => break got,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
        });
        let message = b"far more than the pipe holds at once";
        let written = bounded.write_all(message).await;
        assert!(written.is_ok(), "{written:?}");
        drop(bounded);
        let got = reader.await.unwrap_or_default();
        assert_eq!(got, message);
    }
}
