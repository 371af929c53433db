//! The frames read from peers and not yet handled: one queue per peer, which the loop takes
//! in turn, one frame of each peer with frames waiting, round after round.
//!
//! libzmq's ROUTER hands out its peers' messages in turn (it fair-queues among them), but a
//! single queue in arrival order between the I/O thread and the loop would undo that: a
//! peer that sends a thousand large frames would have them all read ahead of another
//! peer's heartbeat, which would wait for every one of them to be decoded and handled.
//! Here a peer's frames wait in its own queue, and the loop takes the next frame of the
//! next peer in turn ([`Frames::next`]), so a peer's frame waits, besides the frame being
//! handled, for at most one frame of each other peer with frames waiting, however many
//! they have.
//!
//! Bounds: a peer's queue holds at most [`PEER_FRAMES`] frames or [`PEER_BYTES`] bytes,
//! all of them together [`ALL_FRAMES`] or [`ALL_BYTES`]. A ROUTER cannot stop reading one
//! peer alone, so while a queue, or the whole, is at its bound the I/O thread reads nothing
//! from the socket: every peer's messages wait in libzmq (each up to its high-water mark,
//! past which libzmq stops reading that peer's connection). The loop wakes it as soon as
//! the bound is left ([`Waker`]), once the full peer's next frame is taken, which is
//! within one round; libzmq then hands out the waiting messages in turn again, one of each
//! peer, so a message that arrived during the pause is read within two of the full peer's
//! frames. The memory a peer takes ahead of the loop is bounded, and so is the delay its
//! backlog costs the others.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use tokio::sync::Notify;

use crate::server::PeerId;

/// Frames of one peer read ahead of the loop: enough that a peer sending a burst of
/// requests rarely stops the reading, few enough to bound what it holds.
pub(crate) const PEER_FRAMES: usize = 64;
/// Bytes of one peer read ahead of the loop: a few of the largest frames.
pub(crate) const PEER_BYTES: usize = 8 << 20;
/// Frames of all peers read ahead of the loop.
pub(crate) const ALL_FRAMES: usize = 4096;
/// Bytes of all peers read ahead of the loop.
pub(crate) const ALL_BYTES: usize = 256 << 20;

/// One peer's frames, oldest first.
#[derive(Default)]
struct Queue {
    frames: VecDeque<Bytes>,
    bytes: usize,
}

impl Queue {
    fn full(&self) -> bool {
        self.frames.len() >= PEER_FRAMES || self.bytes >= PEER_BYTES
    }
}

/// The queues, and the order in which their peers take turns.
#[derive(Default)]
struct State {
    /// The peers with frames waiting (each once), the next to take a turn first, but for
    /// [`State::served`].
    turns: VecDeque<PeerId>,
    /// The peer whose frame was taken last, while it has more waiting: its next turn is
    /// queued when the next frame is taken, after the peers whose frames came meanwhile.
    served: Option<PeerId>,
    queues: HashMap<PeerId, Queue>,
    frames: usize,
    bytes: usize,
    /// How many queues are at their bound.
    full: usize,
    /// The I/O thread found no room and reads no more until woken.
    paused: bool,
}

impl State {
    /// Whether another frame may be read from the socket.
    fn room(&self) -> bool {
        self.full == 0 && self.frames < ALL_FRAMES && self.bytes < ALL_BYTES
    }

    fn push(&mut self, peer: PeerId, frame: Bytes) {
        let queue = self.queues.entry(peer.clone()).or_default();
        if queue.frames.is_empty() {
            self.turns.push_back(peer);
        }
        let was_full = queue.full();
        queue.bytes += frame.len();
        self.bytes += frame.len();
        self.frames += 1;
        queue.frames.push_back(frame);
        if !was_full && queue.full() {
            self.full += 1;
        }
    }

    /// The next peer's oldest frame; that peer's turn comes again after every other peer's
    /// with frames waiting, those read while its frame is handled included.
    fn pop(&mut self) -> Option<(PeerId, Bytes)> {
        if let Some(served) = self.served.take() {
            self.turns.push_back(served);
        }
        while let Some(peer) = self.turns.pop_front() {
            let Some(frame) = self.take(&peer) else {
                continue;
            };
            if self.queues.contains_key(&peer) {
                self.served = Some(peer.clone());
            }
            return Some((peer, frame));
        }
        None
    }

    /// Takes `peer`'s oldest frame, forgetting its queue once empty (its place in `turns`
    /// or `served` is the caller's to settle).
    fn take(&mut self, peer: &PeerId) -> Option<Bytes> {
        let queue = self.queues.get_mut(peer)?;
        let was_full = queue.full();
        let frame = queue.frames.pop_front()?;
        queue.bytes -= frame.len();
        self.bytes -= frame.len();
        self.frames -= 1;
        if was_full && !queue.full() {
            self.full -= 1;
        }
        if queue.frames.is_empty() {
            self.queues.remove(peer);
        }
        Some(frame)
    }

    /// True when the I/O thread waits to be woken and may read again: it is then no longer
    /// taken to wait.
    fn resume(&mut self) -> bool {
        let resume = self.paused && self.room();
        if resume {
            self.paused = false;
        }
        resume
    }
}

/// The queues, shared by the I/O thread (which fills them) and the loop (which empties
/// them).
#[derive(Default)]
pub(crate) struct Inbox {
    state: Mutex<State>,
    /// Told of each frame queued, for the loop waiting for one.
    ready: Notify,
}

impl Inbox {
    fn state(&self) -> MutexGuard<'_, State> {
        // The state is consistent after every call, so a panic elsewhere leaves it usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// I/O thread: whether it may read a message from the socket now. When not, it must
    /// wait for the loop's wake-up ([`Waker`]) before asking again.
    pub fn may_read(&self) -> bool {
        let mut state = self.state();
        let room = state.room();
        state.paused = !room;
        room
    }

    /// I/O thread: queues a frame read from `peer`; returns [`Inbox::may_read`].
    pub fn push(&self, peer: PeerId, frame: Bytes) -> bool {
        let mut state = self.state();
        state.push(peer, frame);
        let room = state.room();
        state.paused = !room;
        drop(state);
        self.ready.notify_one();
        room
    }
}

/// The loop's end of the wake-ups: a PAIR socket, whose peer the I/O thread polls beside
/// the ROUTER, so that a wake-up ends its sleep at once.
pub(crate) struct Waker(pub zmq::Socket);

impl Waker {
    fn wake(&self) {
        // At most one wake-up is ever unread (the I/O thread is woken once per pause); a
        // failure means the I/O thread is gone, the server stopping.
        let _ = self.0.send(&[][..], zmq::DONTWAIT);
    }
}

/// The loop's end of the inbox.
pub(crate) struct Frames {
    inbox: Arc<Inbox>,
    waker: Waker,
}

impl Frames {
    pub fn new(inbox: Arc<Inbox>, waker: Waker) -> Self {
        Frames { inbox, waker }
    }

    /// The next frame to handle, in turn among the peers with frames waiting. Cancel-safe:
    /// a frame is taken only when returned. Each frame takes a unit of the task's budget,
    /// so that the loop lets the runtime's other tasks run now and then however many
    /// frames wait (as a channel's receiver does).
    pub async fn next(&mut self) -> (PeerId, Bytes) {
        loop {
            tokio::task::consume_budget().await;
            let next = {
                let mut state = self.inbox.state();
                state.pop().map(|next| (next, state.resume()))
            };
            if let Some((next, resume)) = next {
                if resume {
                    self.waker.wake();
                }
                return next;
            }
            self.inbox.ready.notified().await;
        }
    }

    /// Whether frames of `peer` wait their turn.
    pub fn waiting(&self, peer: &PeerId) -> bool {
        self.inbox.state().queues.contains_key(peer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(name: &str) -> PeerId {
        Bytes::copy_from_slice(name.as_bytes())
    }

    fn frame(n: usize) -> Bytes {
        Bytes::from(vec![0; n])
    }

    #[test]
    fn peers_take_turns_one_frame_each() {
        let mut state = State::default();
        for _ in 0..5 {
            state.push(peer("flood"), frame(10));
        }
        state.push(peer("calm"), frame(10));
        state.push(peer("other"), frame(10));
        state.push(peer("calm"), frame(10));
        let order: Vec<PeerId> = std::iter::from_fn(|| state.pop().map(|(p, _)| p)).collect();
        let names: Vec<&[u8]> = order.iter().map(|p| &p[..]).collect();
        let expected: Vec<&[u8]> = vec![
            b"flood", b"calm", b"other", b"flood", b"calm", b"flood", b"flood", b"flood",
        ];
        assert_eq!(names, expected);
        assert_eq!((state.frames, state.bytes, state.full), (0, 0, 0));
        assert!(state.queues.is_empty() && state.turns.is_empty());
    }

    #[test]
    fn a_frame_read_while_another_peers_is_handled_comes_before_that_peers_next() {
        let mut state = State::default();
        for _ in 0..3 {
            state.push(peer("flood"), frame(10));
        }
        assert_eq!(state.pop().map(|(p, _)| p), Some(peer("flood")));
        // Read while the flooder's frame is handled.
        state.push(peer("calm"), frame(10));
        assert_eq!(state.pop().map(|(p, _)| p), Some(peer("calm")));
        assert_eq!(state.pop().map(|(p, _)| p), Some(peer("flood")));
        state.push(peer("calm"), frame(10));
        assert_eq!(state.pop().map(|(p, _)| p), Some(peer("calm")));
        assert_eq!(state.pop().map(|(p, _)| p), Some(peer("flood")));
        assert!(state.pop().is_none());
        assert!(state.served.is_none() && state.turns.is_empty());
    }

    #[test]
    fn a_full_queue_stops_the_reading_until_its_next_frame_is_taken() {
        let mut state = State::default();
        for _ in 0..PEER_FRAMES - 1 {
            state.push(peer("flood"), frame(1));
        }
        assert!(state.room());
        state.push(peer("flood"), frame(1));
        assert!(!state.room(), "a peer at its bound in frames");
        state.paused = true;
        state.push(peer("calm"), frame(1));
        // The flooder's turn comes first: one frame taken puts it under its bound.
        assert_eq!(state.pop().map(|(p, _)| p), Some(peer("flood")));
        assert!(state.resume(), "one frame under the bound");
        assert!(!state.paused);

        let mut big = State::default();
        big.push(peer("big"), frame(PEER_BYTES - 1));
        assert!(big.room());
        big.push(peer("big"), frame(1));
        assert!(!big.room(), "a peer at its bound in bytes");
        big.paused = true;
        big.push(peer("calm"), frame(1));
        assert_eq!(big.pop().map(|(p, _)| p), Some(peer("big")));
        assert!(big.resume());
    }

    #[test]
    fn all_queues_together_are_bounded() {
        let mut state = State::default();
        for n in 0..ALL_FRAMES {
            state.push(peer(&format!("p{n}")), frame(1));
        }
        assert_eq!(state.full, 0);
        assert!(!state.room());
        state.paused = true;
        assert!(state.pop().is_some());
        assert!(state.resume());
    }
}
