//! WarmPool: sandboxes prepared ahead of time, handed out fresh and refilled in the background.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use super::{Exec, Sandbox, SandboxConfig};
use crate::error::{Error, Result};

struct Inner {
    template: Sandbox,
    ready: Mutex<VecDeque<Sandbox>>,
    wake: Condvar,
    size: usize,
    stop: AtomicBool,
}

/// `size` ready sandboxes, each a fork of one template prepared with setup commands.
/// [`WarmPool::acquire`] hands out a fresh one and a background thread forks a replacement.
pub struct WarmPool {
    inner: Arc<Inner>,
    filler: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for WarmPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WarmPool")
            .field("size", &self.inner.size)
            .field("ready", &self.ready())
            .finish()
    }
}

impl WarmPool {
    /// Create the template, run `setup` in it (each must exit 0), and fill the pool.
    pub fn new(config: SandboxConfig, setup: &[Exec], size: usize) -> Result<WarmPool> {
        let template = Sandbox::create(config)?;
        for (i, e) in setup.iter().enumerate() {
            let r = template.exec(e)?;
            if !r.ok() {
                return Err(Error::Sandbox(format!(
                    "warm pool setup command {i} failed ({}, {}): {}",
                    r.exit_code
                        .map_or("no exit status".into(), |c| format!("exit {c}")),
                    super::Killed::describe(r.killed),
                    r.stderr.trim()
                )));
            }
        }
        let mut ready = VecDeque::with_capacity(size);
        for _ in 0..size {
            ready.push_back(template.fork()?);
        }
        let inner = Arc::new(Inner {
            template,
            ready: Mutex::new(ready),
            wake: Condvar::new(),
            size,
            stop: AtomicBool::new(false),
        });
        let bg = inner.clone();
        let filler = std::thread::Builder::new()
            .name("nenyax-warm-pool".into())
            .spawn(move || refill(&bg))
            .map_err(|e| Error::io("sandbox: start the warm pool's refill thread", e))?;
        Ok(WarmPool {
            inner,
            filler: Some(filler),
        })
    }

    /// A fresh sandbox: a ready one when there is one, else a fork made now.
    pub fn acquire(&self) -> Result<Sandbox> {
        let got = self
            .inner
            .ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front();
        self.inner.wake.notify_one();
        match got {
            Some(sb) => Ok(sb),
            None => self.inner.template.fork(),
        }
    }

    /// How many sandboxes are ready now.
    pub fn ready(&self) -> usize {
        self.inner
            .ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// The pool's target size.
    pub fn size(&self) -> usize {
        self.inner.size
    }
}

fn refill(inner: &Inner) {
    loop {
        {
            let mut q = inner.ready.lock().unwrap_or_else(|e| e.into_inner());
            while q.len() >= inner.size && !inner.stop.load(Ordering::SeqCst) {
                q = inner.wake.wait(q).unwrap_or_else(|e| e.into_inner());
            }
        }
        if inner.stop.load(Ordering::SeqCst) {
            return;
        }
        match inner.template.fork() {
            Ok(sb) => inner
                .ready
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_back(sb),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(100)),
        }
    }
}

impl Drop for WarmPool {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        self.inner.wake.notify_all();
        if let Some(h) = self.filler.take() {
            let _ = h.join();
        }
    }
}
