//! What every connection of a server shares: the environment, the limits, the session count,
//! the HTTP sessions and the id generator.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::options::ServeOptions;
use super::protocol::Play;
use crate::env::Environment;

pub(super) struct HttpSession {
    pub(super) play: Arc<Mutex<Play>>,
    pub(super) last_used: Instant,
}

pub(super) struct Shared {
    pub(super) env: Arc<dyn Environment>,
    pub(super) opts: ServeOptions,
    /// Live episode sessions (WS connections past the capacity check, plus HTTP sessions).
    pub(super) sessions: AtomicUsize,
    pub(super) http_sessions: Mutex<HashMap<String, HttpSession>>,
    pub(super) metadata: Vec<u8>,
    pub(super) schema: Vec<u8>,
    pub(super) openapi: Vec<u8>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    /// A fresh unguessable id: 128 bits from the OS. An HTTP session id is all a client needs
    /// to step that session, and ids mixed from one seed and a counter gave the seed away
    /// (SplitMix64 is invertible), and with it every other client's ids.
    pub(super) fn new_id(&self) -> String {
        crate::http_server::unguessable_id()
    }

    /// Take a session slot, reaping expired HTTP sessions first; `Err` carries the count.
    pub(super) fn acquire(&self) -> std::result::Result<(), usize> {
        self.reap();
        let max = self.opts.max_sessions;
        self.sessions
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .map(|_| ())
    }

    pub(super) fn release(&self) {
        self.sessions.fetch_sub(1, Ordering::SeqCst);
    }

    pub(super) fn reap(&self) {
        let idle = self.opts.idle_timeout;
        let mut map = lock(&self.http_sessions);
        let before = map.len();
        map.retain(|_, s| s.last_used.elapsed() < idle);
        let gone = before - map.len();
        drop(map);
        if gone > 0 {
            self.sessions.fetch_sub(gone, Ordering::SeqCst);
        }
    }
}
