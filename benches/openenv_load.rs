//! A WebSocket load client for OpenEnv servers, used by benches/openenv_compare.sh to measure
//! `nenyax serve` side by side with the Python OpenEnv servers on the same machine.
//!
//! Each of `--sessions` threads holds one `/ws` session and plays episodes back to back for
//! `--seconds`: a `reset`, then `--steps` `step` frames carrying `--action` (the step frame's
//! `data`, e.g. `{"value":"hello"}` for Nenyax servers, `{"message":"hello"}` for the scaffold).
//! Prints one JSON line: episodes/s, steps/s, p50/p99 step latency (ms), errors.
//!
//! cargo bench --bench openenv_load -- --url http://127.0.0.1:8000 --sessions 16 --seconds 10

use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tungstenite::Message;

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_string())
}

struct Tally {
    episodes: u64,
    latencies_us: Vec<u64>,
    errors: u64,
    first_error: Option<String>,
}

fn session(url: &str, action: &Value, steps: usize, until: Instant) -> Tally {
    let mut t = Tally {
        episodes: 0,
        latencies_us: Vec::new(),
        errors: 0,
        first_error: None,
    };
    let ws_url = format!("{}/ws", url.replacen("http", "ws", 1));
    let (mut ws, _) = match tungstenite::connect(&ws_url) {
        Ok(c) => c,
        Err(e) => {
            t.errors += 1;
            t.first_error = Some(format!("connect: {e}"));
            return t;
        }
    };
    let call = |ws: &mut tungstenite::WebSocket<_>, frame: &str| -> Result<Value, String> {
        ws.send(Message::text(frame)).map_err(|e| e.to_string())?;
        loop {
            match ws.read().map_err(|e| e.to_string())? {
                Message::Text(x) => {
                    let v: Value = serde_json::from_str(x.as_str()).map_err(|e| e.to_string())?;
                    if v["type"] == "error" {
                        return Err(v.to_string());
                    }
                    return Ok(v);
                }
                _ => continue,
            }
        }
    };
    let reset = json!({"type": "reset", "data": {}}).to_string();
    let step = json!({"type": "step", "data": action}).to_string();
    'outer: while Instant::now() < until {
        if let Err(e) = call(&mut ws, &reset) {
            t.errors += 1;
            t.first_error.get_or_insert(e);
            break;
        }
        for _ in 0..steps {
            let t0 = Instant::now();
            match call(&mut ws, &step) {
                Ok(_) => t.latencies_us.push(t0.elapsed().as_micros() as u64),
                Err(e) => {
                    t.errors += 1;
                    t.first_error.get_or_insert(e);
                    break 'outer;
                }
            }
        }
        t.episodes += 1;
    }
    let _ = ws.send(Message::text(r#"{"type":"close"}"#));
    let _ = ws.close(None);
    t
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // `cargo bench` passes --bench; without --url there is nothing to measure.
    if !args.iter().any(|a| a == "--url") {
        eprintln!("openenv_load: pass --url (see benches/openenv_compare.sh); nothing to do");
        return;
    }
    let url = arg(&args, "--url", "http://127.0.0.1:8000");
    let sessions: usize = arg(&args, "--sessions", "16").parse().expect("--sessions");
    let seconds: f64 = arg(&args, "--seconds", "10").parse().expect("--seconds");
    let steps: usize = arg(&args, "--steps", "10").parse().expect("--steps");
    let action: Value =
        serde_json::from_str(&arg(&args, "--action", r#"{"value":"hello"}"#)).expect("--action");
    let t0 = Instant::now();
    let until = t0 + Duration::from_secs_f64(seconds);
    let tallies: Vec<Tally> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..sessions)
            .map(|_| s.spawn(|| session(&url, &action, steps, until)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let wall = t0.elapsed().as_secs_f64();
    let episodes: u64 = tallies.iter().map(|t| t.episodes).sum();
    let errors: u64 = tallies.iter().map(|t| t.errors).sum();
    let mut lat: Vec<u64> = tallies
        .iter()
        .flat_map(|t| t.latencies_us.clone())
        .collect();
    lat.sort_unstable();
    let pct = |p: f64| -> f64 {
        if lat.is_empty() {
            return f64::NAN;
        }
        lat[((lat.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0
    };
    println!(
        "{}",
        json!({
            "url": url, "sessions": sessions, "steps_per_episode": steps, "seconds": wall,
            "episodes": episodes, "episodes_per_s": episodes as f64 / wall,
            "steps_per_s": lat.len() as f64 / wall,
            "p50_ms": pct(0.50), "p99_ms": pct(0.99),
            "errors": errors,
            "first_error": tallies.iter().find_map(|t| t.first_error.clone()),
        })
    );
}
