//! Processes found by a variable in their environment: what a command left behind after leaving
//! its process group (setsid, daemons) still carries the marker its sandbox or command set.

use std::time::Duration;

/// SIGKILL every process on this host whose environment holds `needle` (`NAME=value\0`);
/// returns how many.
pub(super) fn kill_env(needle: &str) -> usize {
    // A child caught inside execve can show an empty environ for that moment, so one pass that
    // finds nothing proves little: stop only after two in a row (a detached child escaped CI's
    // run once this way).
    let (mut total, mut quiet) = (0, 0);
    for _ in 0..10 {
        let n = kill_env_once(needle);
        total += n;
        quiet = if n == 0 { quiet + 1 } else { 0 };
        if quiet == 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    total
}

fn kill_env_once(needle: &str) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let me = std::process::id();
    let mut killed = 0;
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid as u32 == me {
            continue;
        }
        if let Ok(env) = std::fs::read(e.path().join("environ")) {
            if env.windows(needle.len()).any(|w| w == needle.as_bytes())
                && nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                )
                .is_ok()
            {
                killed += 1;
            }
        }
    }
    killed
}
