//! Attempt scopes: what a middleware keeps of one attempt from before it starts to how it
//! ended, for tracers that make their own span per attempt (the OpenTelemetry middleware
//! does: its sampler decides before anything of the span is built).

use std::future::Future;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use hopper_core::Outcome;

/// One attempt as a middleware sees it from outside, made by
/// [`Middleware::attempt`](super::Middleware::attempt) before the attempt starts.
pub trait AttemptScope: Send + Sync {
    /// Runs `poll`, one poll of the attempt (the lease's hold, the middleware chain, the
    /// worker, the log's stores), inside this scope: with a tracing context attached, say.
    /// By default, just runs it.
    fn within(&self, poll: &mut dyn FnMut()) {
        poll()
    }

    /// Called once when the attempt ended: with its outcome (`None`: dropped, nothing
    /// reported, as for a lost lease) and how long it ran. A runtime stopped abruptly
    /// (its task aborted) drops the scope without calling it.
    fn end(self: Box<Self>, outcome: Option<&Outcome>, ran: Duration);
}

/// The scopes of one attempt, outermost first.
pub(crate) type Scopes = Vec<Box<dyn AttemptScope>>;

/// Runs `future` inside every scope of `scopes`, the first outermost, at each poll.
pub(crate) async fn within<F: Future>(scopes: &[Box<dyn AttemptScope>], future: F) -> F::Output {
    if scopes.is_empty() {
        return future.await;
    }
    let mut future = pin!(future);
    std::future::poll_fn(|cx| {
        let mut polled = Poll::Pending;
        nest(scopes, &mut || polled = future.as_mut().poll(cx));
        polled
    })
    .await
}

fn nest(scopes: &[Box<dyn AttemptScope>], poll: &mut dyn FnMut()) {
    match scopes.split_first() {
        Some((first, rest)) => first.within(&mut || nest(rest, poll)),
        None => poll(),
    }
}

/// Ends every scope of an attempt, in order.
pub(crate) fn end(scopes: Scopes, outcome: Option<&Outcome>, ran: Duration) {
    for scope in scopes {
        scope.end(outcome, ran);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Writes `name>` when entered and `<name` when left.
    struct Marks(&'static str, Arc<Mutex<String>>);

    fn mark(marks: &Mutex<String>, mark: &str) {
        marks
            .lock()
            .expect("no test thread panicked")
            .push_str(mark);
    }

    impl AttemptScope for Marks {
        fn within(&self, poll: &mut dyn FnMut()) {
            mark(&self.1, &format!("{}>", self.0));
            poll();
            mark(&self.1, &format!("<{}", self.0));
        }

        fn end(self: Box<Self>, _: Option<&Outcome>, _: Duration) {}
    }

    #[tokio::test]
    async fn every_poll_runs_inside_the_scopes_first_outermost() {
        let marks = Arc::new(Mutex::new(String::new()));
        let scopes: Scopes = vec![
            Box::new(Marks("a", marks.clone())),
            Box::new(Marks("b", marks.clone())),
        ];
        let seen = marks.clone();
        let answer = within(&scopes, async move {
            mark(&seen, "1");
            tokio::task::yield_now().await;
            mark(&seen, "2");
            7
        })
        .await;
        assert_eq!(answer, 7);
        let marks = marks.lock().expect("no test thread panicked");
        assert_eq!(*marks, "a>b>1<b<aa>b>2<b<a");
    }
}
