//! A command's output, captured up to a cap per stream: what is past the cap is drained (so the
//! command never blocks on a full pipe) and counted, not kept.

use std::io::Read;
use std::process::Child;
use std::sync::mpsc;

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
