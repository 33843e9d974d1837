//! Reading a worker's reply lines on the calling thread, with a timeout.
//!
//! A reader thread per worker would add a second wake-up to every reply. On virtual machines
//! waking a halted vCPU dominates a round trip (measured here: 127 us blocking against 33 us when
//! the reader stays awake), so the caller first polls the pipe for a short while, yielding its
//! core to anything runnable, and only then sleeps in `poll(2)` until the deadline.

use std::io::{self, Read};
use std::process::ChildStdout;
use std::time::{Duration, Instant};

/// Lines from a child's stdout.
pub(crate) struct LineReader {
    out: ChildStdout,
    /// Zeroed once and reused, so that a read never clears memory it is about to overwrite.
    buf: Vec<u8>,
    /// The unread bytes are `buf[start..end]`.
    start: usize,
    end: usize,
    /// How long to keep polling before sleeping: a small environment's step answers well
    /// within it, and a slow call costs at most this much extra CPU.
    spin: Duration,
    /// Longest line accepted ([`crate::limits::BRIDGE_LINE`]); the buffer never grows past it,
    /// so a worker that writes without end cannot take the host's memory.
    max: usize,
}

impl LineReader {
    pub(crate) fn new(out: ChildStdout, spin: Duration, max: usize) -> io::Result<LineReader> {
        set_nonblocking(&out)?;
        Ok(LineReader {
            out,
            buf: vec![0; (64 * 1024).min(max.saturating_add(1))],
            start: 0,
            end: 0,
            spin,
            max,
        })
    }

    /// The next line without its newline; `Ok(None)` when `timeout` passed first, an
    /// `UnexpectedEof` error when the child closed its end, an `InvalidData` error when the
    /// line is longer than the cap (the rest of the stream is then unusable).
    pub(crate) fn read_line(&mut self, timeout: Duration) -> io::Result<Option<String>> {
        let t0 = Instant::now();
        let mut scanned = self.start;
        loop {
            if let Some(i) = self.buf[scanned..self.end].iter().position(|&b| b == b'\n') {
                let nl = scanned + i;
                if nl - self.start > self.max {
                    return Err(too_long());
                }
                let line = String::from_utf8_lossy(&self.buf[self.start..nl]).into_owned();
                self.start = nl + 1;
                if self.start == self.end {
                    (self.start, self.end) = (0, 0);
                }
                return Ok(Some(line));
            }
            if self.end - self.start > self.max {
                return Err(too_long());
            }
            if self.end == self.buf.len() {
                // Full: move the partial line to the front, or grow for a long one, up to one
                // byte past the cap (enough to tell that a line broke it).
                if self.start > 0 {
                    self.buf.copy_within(self.start..self.end, 0);
                    (self.end, self.start) = (self.end - self.start, 0);
                } else {
                    let room = (self.buf.len() * 2).min(self.max.saturating_add(1));
                    self.buf.resize(room, 0);
                }
            }
            scanned = self.end;
            match self.out.read(&mut self.buf[self.end..]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let waited = t0.elapsed();
                    if waited >= timeout {
                        return Ok(None);
                    }
                    if waited < self.spin {
                        std::thread::yield_now();
                    } else {
                        wait_readable(&self.out, timeout - waited)?;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

fn too_long() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "line over the cap")
}

#[cfg(unix)]
fn set_nonblocking(out: &ChildStdout) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = out.as_raw_fd();
    // SAFETY: fcntl on a descriptor this process owns, with flag arguments only.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(unix)]
fn wait_readable(out: &ChildStdout, timeout: Duration) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut pfd = libc::pollfd {
        fd: out.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // Round up so that a sub-millisecond remainder still waits instead of spinning.
    let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
    // SAFETY: one valid pollfd for the duration of the call.
    let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    // Readable, hung up, timed out or interrupted: the caller's next read or deadline check
    // tells which.
    Ok(())
}

// Elsewhere reads block: there is no timeout, but replies still arrive.
#[cfg(not(unix))]
fn set_nonblocking(_: &ChildStdout) -> io::Result<()> {
    Ok(())
}

#[cfg(not(unix))]
fn wait_readable(_: &ChildStdout, _: Duration) -> io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    fn reader(script: &str, max: usize) -> (std::process::Child, LineReader) {
        let mut child = Command::new("sh")
            .args(["-c", script])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        (child, LineReader::new(out, Duration::ZERO, max).unwrap())
    }

    #[test]
    fn lines_up_to_the_cap_pass_and_longer_ones_are_refused() {
        let t = Duration::from_secs(10);
        let (mut c, mut r) = reader("printf 'abc\\n0123456789\\n'", 10);
        assert_eq!(r.read_line(t).unwrap().as_deref(), Some("abc"));
        assert_eq!(r.read_line(t).unwrap().as_deref(), Some("0123456789"));
        c.wait().unwrap();

        let (mut c, mut r) = reader("printf '0123456789X\\n'", 10);
        let e = r.read_line(t).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        c.wait().unwrap();

        // No newline ever: refused once the cap is passed, with the buffer at the cap.
        let (mut c, mut r) = reader("exec cat /dev/zero", 200_000);
        let e = r.read_line(t).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(r.buf.len() <= 200_001, "{}", r.buf.len());
        c.kill().unwrap();
        c.wait().unwrap();
    }
}
