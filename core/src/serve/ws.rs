//! WebSocket `/ws`: one connection, one episode session, OpenEnv frames in and out, with
//! pings, an idle timeout and bounded frames.

use serde_json::{json, Value};
use std::io::{self, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tungstenite::{Message, WebSocket};

use super::protocol::{self, empty_state, error_frame, native_action, Fault, Play, ResetArgs};
use super::shared::Shared;
use crate::http_server::{Request, State};
use crate::openenv_wire::{code, ClientFrame, ServerFrame};

pub(super) fn websocket(
    mut stream: TcpStream,
    leftover: Vec<u8>,
    req: &Request,
    shared: &Arc<Shared>,
    state: &State,
) {
    let key = req.header("sec-websocket-key").map(str::to_string);
    let version_ok = req.header("sec-websocket-version") == Some("13");
    let Some(key) = key.filter(|_| version_ok && req.method == "GET") else {
        let body = r#"{"detail":"a WebSocket upgrade needs GET, Sec-WebSocket-Key and Sec-WebSocket-Version: 13"}"#;
        let _ = stream.write_all(
            format!(
                "HTTP/1.1 426 Upgrade Required\r\nsec-websocket-version: 13\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
        return;
    };
    let accept = tungstenite::handshake::derive_accept_key(key.as_bytes());
    let head = format!(
        "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-accept: {accept}\r\n\r\n"
    );
    if stream.write_all(head.as_bytes()).is_err() {
        return;
    }
    let max = shared.opts.max_message_bytes;
    let config = WebSocketConfig::default()
        .max_message_size(Some(max))
        .max_frame_size(Some(max));
    let tick = shared.opts.ping_interval.min(shared.opts.idle_timeout);
    let _ = stream.set_read_timeout(Some(tick));
    let mut ws = WebSocket::from_partially_read(stream, leftover, Role::Server, Some(config));

    // Like OpenEnv: accept first, then refuse with a CAPACITY_REACHED frame and close 1000.
    if shared.acquire().is_err() {
        let active = shared.sessions.load(Ordering::SeqCst);
        let max_s = shared.opts.max_sessions;
        let frame = error_frame(
            code::CAPACITY_REACHED,
            &format!(
                "Server at capacity: {active}/{max_s} sessions active. Cannot accept new connections."
            ),
            None,
        );
        let mut frame = frame;
        frame["data"]["active_sessions"] = json!(active);
        frame["data"]["max_sessions"] = json!(max_s);
        let _ = ws.send(Message::text(frame.to_string()));
        close_ws(&mut ws, CloseCode::Normal, "");
        return;
    }
    let env_id = shared.env.manifest().id.clone();
    let mut play: Option<Play> = None;
    let mut last = Instant::now();
    let mut last_ping = Instant::now();
    loop {
        if state.stopping() {
            close_ws(&mut ws, CloseCode::Away, "server stopping");
            break;
        }
        match ws.read() {
            Ok(Message::Text(t)) => {
                last = Instant::now();
                match handle_frame(shared, &env_id, &mut play, t.as_str()) {
                    Some(reply) => {
                        if ws.send(Message::text(reply.to_string())).is_err() {
                            break;
                        }
                    }
                    None => {
                        close_ws(&mut ws, CloseCode::Normal, "");
                        break;
                    }
                }
            }
            Ok(Message::Binary(_)) => {
                last = Instant::now();
                let f = error_frame(
                    code::INVALID_JSON,
                    "binary frames are not accepted; send JSON text frames",
                    None,
                );
                if ws.send(Message::text(f.to_string())).is_err() {
                    break;
                }
            }
            Ok(Message::Close(_)) => {
                // tungstenite queued the reply; flush it and finish.
                let _ = ws.flush();
                break;
            }
            Ok(_) => {
                // Ping/pong: the pong to a ping is queued; send it now.
                if ws.flush().is_err() {
                    break;
                }
            }
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if last.elapsed() >= shared.opts.idle_timeout {
                    let why = format!(
                        "session idle for more than {:.0} s; reconnect and reset",
                        shared.opts.idle_timeout.as_secs_f64()
                    );
                    close_ws(&mut ws, CloseCode::Away, &why);
                    break;
                }
                if last_ping.elapsed() >= shared.opts.ping_interval {
                    last_ping = Instant::now();
                    if ws.send(Message::Ping(Vec::new().into())).is_err() {
                        break;
                    }
                }
            }
            Err(tungstenite::Error::Capacity(_)) => {
                let why = format!("message larger than the limit of {max} bytes");
                abort_ws(&mut ws, CloseCode::Size, &why);
                break;
            }
            Err(tungstenite::Error::Utf8(_)) => {
                abort_ws(&mut ws, CloseCode::Invalid, "text frame is not UTF-8");
                break;
            }
            Err(tungstenite::Error::Protocol(e)) => {
                abort_ws(&mut ws, CloseCode::Protocol, &e.to_string());
                break;
            }
            Err(_) => break,
        }
    }
    drop(play);
    shared.release();
}

/// Close after a frame the codec could not take (too big, not UTF-8, bad framing): the
/// WebSocket's read state is unusable, so send the close frame, then discard raw bytes until
/// the peer goes (so the close frame is not lost to a reset) for at most 2 s.
fn abort_ws(ws: &mut WebSocket<TcpStream>, code: CloseCode, why: &str) {
    let mut reason = why.to_string();
    while reason.len() > 120 {
        reason.pop();
    }
    let _ = ws.close(Some(CloseFrame {
        code,
        reason: reason.into(),
    }));
    let _ = ws.flush();
    crate::http_server::drain(ws.get_mut());
}

/// Send a close frame and wait briefly for the peer's, so the close is clean.
fn close_ws(ws: &mut WebSocket<TcpStream>, code: CloseCode, why: &str) {
    let mut reason = why.to_string();
    // Close reasons must fit in a control frame (125 bytes with the code).
    while reason.len() > 120 {
        reason.pop();
    }
    let _ = ws.close(Some(CloseFrame {
        code,
        reason: reason.into(),
    }));
    let _ = ws.get_mut().set_read_timeout(Some(Duration::from_secs(2)));
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        match ws.read() {
            Ok(_) => continue,
            Err(_) => break,
        }
    }
    let _ = ws.get_mut().shutdown(Shutdown::Both);
}

/// Answer one text frame; `None` means the client asked to close.
fn handle_frame(
    shared: &Shared,
    env_id: &str,
    play: &mut Option<Play>,
    text: &str,
) -> Option<Value> {
    let frame = match ClientFrame::parse(text) {
        Ok(f) => f,
        Err(error) => return Some(error),
    };
    let out = match frame {
        ClientFrame::Close => return None,
        ClientFrame::State => Ok(ServerFrame::State(
            play.as_ref()
                .map_or_else(|| empty_state(env_id), |p| p.state(env_id)),
        )),
        ClientFrame::Mcp(data) => Ok(ServerFrame::Mcp(protocol::mcp_reply(Some(&data)))),
        ClientFrame::Reset(data) => ResetArgs::from_json(&data, false).and_then(|args| {
            // The previous episode ends before the next starts (it may hold a worker).
            *play = None;
            let id = args.episode_id.clone().unwrap_or_else(|| shared.new_id());
            let (p, envelope) = Play::start(shared.env.as_ref(), &args, id, false)?;
            *play = Some(p);
            Ok(ServerFrame::Observation(envelope))
        }),
        ClientFrame::Step(data) => {
            native_action(&data, &[]).and_then(|action| match play.as_mut() {
                None => Err(Fault::Execution(
                    "no episode is running: send {\"type\": \"reset\"} first".into(),
                )),
                Some(p) => p.step(action, false).map(ServerFrame::Observation),
            })
        }
    };
    Some(out.map_or_else(|f| f.frame(), |f| f.to_json()))
}
