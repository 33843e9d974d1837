//! A command's output, captured up to a cap per stream: what is past the cap is drained (so the
//! command never blocks on a full pipe) and counted, not kept.

use std::io::Read;
use std::process::Child;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Read a child's stdout and stderr on two threads, keeping `cap` bytes of each and counting
/// the rest; each sends `(stream, kept, dropped)` when its pipe closes.
pub(super) fn capture(child: &mut Child, cap: usize) -> mpsc::Receiver<(usize, Vec<u8>, u64)> {
    let (tx, rx) = mpsc::channel();
    let streams: [Option<Box<dyn Read + Send>>; 2] = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    ];
    for (i, stream) in streams.into_iter().enumerate() {
        let tx = tx.clone();
        if let Some(mut s) = stream {
            std::thread::spawn(move || {
                let (mut kept, mut dropped) = (Vec::new(), 0u64);
                let mut buf = [0u8; 16384];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let room = cap.saturating_sub(kept.len()).min(n);
                    kept.extend_from_slice(&buf[..room]);
                    dropped += (n - room) as u64;
                }
                let _ = tx.send((i, kept, dropped));
            });
        }
    }
    rx
}

/// Wait at most `grace` for both streams once the command has ended (a child it left behind may
/// still hold a pipe): `[stdout, stderr]` as kept, and the bytes dropped past the cap.
pub(super) fn collect(
    rx: &mpsc::Receiver<(usize, Vec<u8>, u64)>,
    grace: Duration,
) -> ([Vec<u8>; 2], u64) {
    let mut out = [Vec::new(), Vec::new()];
    let mut dropped = 0;
    let until = Instant::now() + grace;
    for _ in 0..2 {
        match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
            Ok((i, kept, d)) => {
                out[i] = kept;
                dropped += d;
            }
            Err(_) => break,
        }
    }
    (out, dropped)
}
