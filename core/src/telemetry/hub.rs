//! [`Telemetry`]: the bounded queue between rollouts and the sinks, drained by one exporter
//! thread. Rollouts only try to enqueue; a full queue drops the event and counts it, so a slow
//! or dead collector never slows or fails a run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender, TrySendError};

use super::sinks::build;
use super::spec::{RunInfo, Sink, SinkSpec};
use crate::contract::Trajectory;
use crate::error::{Error, Result};

/// Events held at most before new ones are dropped.
pub const DEFAULT_CAPACITY: usize = 4096;
/// How often buffered data is flushed while events keep arriving.
pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_secs(2);
/// The longest `flush`/`finish` wait for the exporter, so a dead collector never hangs exit.
pub const DEFAULT_FINISH_TIMEOUT: Duration = Duration::from_secs(5);

enum Event {
    Start(RunInfo),
    Episode(Box<Trajectory>),
    Metrics(u64, Vec<(String, f64)>),
    Artifact(String, Vec<u8>),
    Flush(Sender<()>),
    Finish(bool, Sender<()>),
}

/// Counters of a [`Telemetry`] hub, for reports and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TelemetryStats {
    /// Events accepted into the queue.
    pub queued: u64,
    /// Events every sink has been handed.
    pub exported: u64,
    /// Events dropped because the queue was full (or the exporter had stopped).
    pub dropped: u64,
    /// Sink calls that returned an error.
    pub errors: u64,
}

#[derive(Default)]
struct Counters {
    queued: AtomicU64,
    exported: AtomicU64,
    dropped: AtomicU64,
    errors: AtomicU64,
    warned_drop: AtomicBool,
}

/// Sends run events to sinks on one background thread through a bounded queue; cheap to share
/// (`Arc<Telemetry>`) between the CLI, a [`crate::Runner`] and a trainer.
pub struct Telemetry {
    tx: Mutex<Option<Sender<Event>>>,
    counters: Arc<Counters>,
    thread: Mutex<Option<JoinHandle<()>>>,
    names: Vec<&'static str>,
    timeout: Duration,
    finished: AtomicBool,
}

impl Telemetry {
    /// Build the sinks `specs` name and start the exporter (default capacity and intervals).
    pub fn from_specs(specs: &[SinkSpec]) -> Result<Self> {
        let sinks = specs.iter().map(build).collect::<Result<Vec<_>>>()?;
        Self::new(sinks, DEFAULT_CAPACITY, DEFAULT_FLUSH_INTERVAL)
    }

    /// Start the exporter thread over `sinks` with a queue of `capacity` events, flushing every
    /// `flush_every` while events arrive.
    pub fn new(sinks: Vec<Box<dyn Sink>>, capacity: usize, flush_every: Duration) -> Result<Self> {
        if capacity == 0 {
            return Err(Error::Config(
                "a telemetry queue needs room for at least 1 event".into(),
            ));
        }
        let names = sinks.iter().map(|s| s.name()).collect();
        let (tx, rx) = bounded(capacity);
        let counters = Arc::new(Counters::default());
        let c = counters.clone();
        let thread = std::thread::Builder::new()
            .name("nenyax-telemetry".into())
            .spawn(move || export_loop(sinks, rx, c, flush_every))
            .map_err(|e| Error::Config(format!("cannot start the telemetry thread: {e}")))?;
        Ok(Telemetry {
            tx: Mutex::new(Some(tx)),
            counters,
            thread: Mutex::new(Some(thread)),
            names,
            timeout: DEFAULT_FINISH_TIMEOUT,
            finished: AtomicBool::new(false),
        })
    }

    /// The longest [`Telemetry::flush`] / [`Telemetry::finish`] waits for the exporter.
    pub fn finish_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The names of the sinks, in order.
    pub fn sinks(&self) -> &[&'static str] {
        &self.names
    }

    /// The run begins; sinks open their run.
    pub fn start(&self, run: RunInfo) {
        self.send(Event::Start(run));
    }

    /// One finished episode (cloned into the queue; dropped if the queue is full).
    pub fn episode(&self, traj: &Trajectory) {
        if self.has_room() {
            self.send(Event::Episode(Box::new(traj.clone())));
        } else {
            self.drop_one();
        }
    }

    /// Named values at `step` (a training round, a batch of a run).
    pub fn metrics(&self, step: u64, values: &[(String, f64)]) {
        self.send(Event::Metrics(step, values.to_vec()));
    }

    /// A file to keep with the run.
    pub fn artifact(&self, name: &str, bytes: &[u8]) {
        self.send(Event::Artifact(name.to_string(), bytes.to_vec()));
    }

    /// Wait (at most the finish timeout) until every sink has sent what it holds.
    pub fn flush(&self) -> bool {
        let (ack, done) = bounded(1);
        self.send_wait(Event::Flush(ack), &done)
    }

    /// End the run: sinks finish, waiting at most the finish timeout; then report drops and
    /// errors on stderr. Later calls (and Drop) do nothing.
    pub fn finish(&self, ok: bool) -> TelemetryStats {
        if self.finished.swap(true, Ordering::SeqCst) {
            return self.stats();
        }
        let (ack, done) = bounded(1);
        let finished = self.send_wait(Event::Finish(ok, ack), &done);
        // No sender left: the exporter ends once the queue is drained.
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).take();
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if finished {
            if let Some(t) = thread {
                let _ = t.join();
            }
        }
        let stats = self.stats();
        let left = stats.queued.saturating_sub(stats.exported);
        if !finished {
            eprintln!(
                "nenyax: telemetry ({}) did not finish within {:.0?}; {left} events not exported",
                self.names.join(", "),
                self.timeout
            );
        }
        if stats.errors > 0 {
            eprintln!(
                "nenyax: telemetry sink calls failed {} times (the first error of each sink is \
                 shown above; the run was not held up)",
                stats.errors
            );
        }
        if stats.dropped > 0 {
            eprintln!(
                "nenyax: telemetry dropped {} events (queue full: the sinks could not keep up)",
                stats.dropped
            );
        }
        stats
    }

    /// What has been queued, exported, dropped and failed so far.
    pub fn stats(&self) -> TelemetryStats {
        let c = &self.counters;
        TelemetryStats {
            queued: c.queued.load(Ordering::Relaxed),
            exported: c.exported.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            errors: c.errors.load(Ordering::Relaxed),
        }
    }

    fn has_room(&self) -> bool {
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        tx.as_ref().is_some_and(|t| !t.is_full())
    }

    fn send(&self, event: Event) {
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        match tx.as_ref().map(|t| t.try_send(event)) {
            Some(Ok(())) => {
                self.counters.queued.fetch_add(1, Ordering::Relaxed);
            }
            Some(Err(TrySendError::Full(_) | TrySendError::Disconnected(_))) | None => {
                drop(tx);
                self.drop_one();
            }
        }
    }

    fn drop_one(&self) {
        self.counters.dropped.fetch_add(1, Ordering::Relaxed);
        if !self.counters.warned_drop.swap(true, Ordering::Relaxed) {
            eprintln!(
                "nenyax: telemetry queue full, dropping events (the run goes on; the count is \
                 reported at the end)"
            );
        }
    }

    /// Queue `event` (waiting for room at most the timeout) and wait for its acknowledgement.
    fn send_wait(&self, event: Event, done: &Receiver<()>) -> bool {
        let deadline = Instant::now() + self.timeout;
        let sent = {
            let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
            match tx.as_ref() {
                Some(t) => t.send_deadline(event, deadline).is_ok(),
                None => false,
            }
        };
        sent && done.recv_deadline(deadline).is_ok()
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.finish(true);
    }
}

fn export_loop(
    mut sinks: Vec<Box<dyn Sink>>,
    rx: Receiver<Event>,
    counters: Arc<Counters>,
    flush_every: Duration,
) {
    let mut reported = vec![false; sinks.len()];
    let mut dirty = false;
    let mut next_flush = Instant::now() + flush_every;
    let mut each = |sinks: &mut Vec<Box<dyn Sink>>,
                    f: &mut dyn FnMut(&mut dyn Sink) -> Result<()>| {
        for (i, sink) in sinks.iter_mut().enumerate() {
            if let Err(e) = f(sink.as_mut()) {
                counters.errors.fetch_add(1, Ordering::Relaxed);
                if !std::mem::replace(&mut reported[i], true) {
                    eprintln!(
                        "nenyax: telemetry sink {}: {e} (the run goes on; later errors of this \
                         sink are only counted)",
                        sink.name()
                    );
                }
            }
        }
    };
    loop {
        let event = match rx.recv_deadline(next_flush) {
            Ok(event) => event,
            Err(RecvTimeoutError::Timeout) => {
                if std::mem::take(&mut dirty) {
                    each(&mut sinks, &mut |s| s.flush());
                }
                next_flush = Instant::now() + flush_every;
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return,
        };
        match event {
            Event::Start(run) => each(&mut sinks, &mut |s| s.start(&run)),
            Event::Episode(traj) => each(&mut sinks, &mut |s| s.episode(&traj)),
            Event::Metrics(step, values) => each(&mut sinks, &mut |s| s.metrics(step, &values)),
            Event::Artifact(name, bytes) => each(&mut sinks, &mut |s| s.artifact(&name, &bytes)),
            Event::Flush(ack) => {
                each(&mut sinks, &mut |s| s.flush());
                dirty = false;
                counters.exported.fetch_add(1, Ordering::Relaxed);
                let _ = ack.send(());
                continue;
            }
            Event::Finish(ok, ack) => {
                each(&mut sinks, &mut |s| s.finish(ok));
                counters.exported.fetch_add(1, Ordering::Relaxed);
                let _ = ack.send(());
                return;
            }
        }
        dirty = true;
        counters.exported.fetch_add(1, Ordering::Relaxed);
        if Instant::now() >= next_flush {
            each(&mut sinks, &mut |s| s.flush());
            dirty = false;
            next_flush = Instant::now() + flush_every;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::Mode;

    /// A sink that blocks on its first episode until released, recording what it got.
    struct Gate {
        release: Receiver<()>,
        got: Arc<Mutex<Vec<String>>>,
        fail: bool,
    }

    impl Sink for Gate {
        fn name(&self) -> &'static str {
            "gate"
        }
        fn episode(&mut self, t: &Trajectory) -> Result<()> {
            let _ = self.release.recv();
            self.got
                .lock()
                .unwrap()
                .push(format!("episode {:?}", t.seed));
            if self.fail {
                return Err(Error::Config("collector said no".into()));
            }
            Ok(())
        }
        fn metrics(&mut self, step: u64, v: &[(String, f64)]) -> Result<()> {
            self.got
                .lock()
                .unwrap()
                .push(format!("metrics {step} {v:?}"));
            Ok(())
        }
        fn finish(&mut self, ok: bool) -> Result<()> {
            self.got.lock().unwrap().push(format!("finish {ok}"));
            Ok(())
        }
    }

    fn traj(seed: i64) -> Trajectory {
        Trajectory::start("builtin:x", Mode::Step, None, Some(seed))
    }

    #[test]
    fn a_full_queue_drops_and_counts_without_blocking() {
        let (release_tx, release) = bounded(0);
        let got = Arc::new(Mutex::new(Vec::new()));
        let gate = Gate {
            release,
            got: got.clone(),
            fail: false,
        };
        let tel = Telemetry::new(vec![Box::new(gate)], 4, Duration::from_secs(60)).unwrap();
        // The exporter takes one episode and blocks in the sink; four more fill the queue.
        for seed in 0..100 {
            tel.episode(&traj(seed));
        }
        let s = tel.stats();
        assert!(s.dropped >= 95 - 1 && s.dropped <= 96, "{s:?}");
        assert_eq!(s.queued + s.dropped, 100);
        // Unblock every episode the sink will see, then finish.
        std::thread::spawn(move || while release_tx.send(()).is_ok() {});
        let end = tel.finish(true);
        assert_eq!(
            end.exported,
            end.queued + 1,
            "the finish event is exported too"
        );
        let got = got.lock().unwrap();
        assert_eq!(got.len() as u64, s.queued + 1);
        assert_eq!(got[0], "episode Some(0)");
        assert_eq!(got.last().unwrap(), "finish true");
    }

    #[test]
    fn a_hung_sink_does_not_hang_finish() {
        let (_keep, release) = bounded::<()>(0);
        let got = Arc::new(Mutex::new(Vec::new()));
        let gate = Gate {
            release,
            got,
            fail: false,
        };
        let tel = Telemetry::new(vec![Box::new(gate)], 16, Duration::from_secs(60))
            .unwrap()
            .finish_timeout(Duration::from_millis(200));
        tel.episode(&traj(1));
        tel.episode(&traj(2));
        assert!(!tel.flush());
        let s = tel.finish(true);
        assert_eq!(s.exported, 0);
        assert_eq!(s.queued, 2);
    }

    #[test]
    fn sink_errors_are_counted_and_later_events_still_delivered() {
        let (release_tx, release) = bounded(16);
        let got = Arc::new(Mutex::new(Vec::new()));
        let gate = Gate {
            release,
            got: got.clone(),
            fail: true,
        };
        for _ in 0..3 {
            release_tx.send(()).unwrap();
        }
        let tel = Telemetry::new(vec![Box::new(gate)], 16, Duration::from_secs(60)).unwrap();
        for seed in 0..3 {
            tel.episode(&traj(seed));
        }
        tel.metrics(7, &[("mean_score".into(), 0.5)]);
        let s = tel.finish(false);
        assert_eq!(s.errors, 3);
        assert_eq!(s.dropped, 0);
        let got = got.lock().unwrap();
        assert_eq!(got[3], "metrics 7 [(\"mean_score\", 0.5)]");
        assert_eq!(got[4], "finish false");
    }

    #[test]
    fn unknown_sinks_are_refused_by_name() {
        let e = Telemetry::from_specs(&[SinkSpec {
            name: "zipkin".into(),
            ..SinkSpec::default()
        }])
        .err()
        .unwrap();
        assert!(e.to_string().contains("otel, mlflow, wandb"), "{e}");
    }
}
