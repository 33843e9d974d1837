//! One WebSocket session with an OpenEnv server, with a keepalive thread that answers the
//! server's pings while the policy is thinking.

use serde_json::Value;
use std::io;
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tungstenite::client::IntoClientRequest;
use tungstenite::protocol::WebSocketConfig;
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

use super::target::{Config, Target};
use crate::error::{Error, Result};
use crate::openenv_wire::{code, ClientFrame, ServerFrame};

type Ws = WebSocket<MaybeTlsStream<TcpStream>>;

struct LinkState {
    ws: Option<Ws>,
    /// Why the connection is unusable, once it is.
    broken: Option<String>,
}

pub(super) struct Link {
    state: Arc<Mutex<LinkState>>,
    stop: Arc<AtomicBool>,
    keepalive: Option<std::thread::JoinHandle<()>>,
    timeout: Duration,
}

fn tcp_of(ws: &Ws) -> &TcpStream {
    match ws.get_ref() {
        MaybeTlsStream::Plain(s) => s,
        MaybeTlsStream::Rustls(s) => s.get_ref(),
        _ => unreachable!("only plain and rustls streams are built"),
    }
}

fn is_timeout(e: &tungstenite::Error) -> bool {
    matches!(e, tungstenite::Error::Io(io) if matches!(io.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut))
}

impl Link {
    pub(super) fn open(target: &Target, config: &Arc<Config>) -> Result<Link> {
        let fail = |m: String| Error::Endpoint {
            url: target.ws.clone(),
            message: m,
        };
        let connect_timeout = config.timeout.min(Duration::from_secs(30));
        let addrs: Vec<_> = (target.host.trim_matches(['[', ']']), target.port)
            .to_socket_addrs()
            .map_err(|e| fail(format!("cannot resolve {}: {e}", target.host)))?
            .collect();
        let mut last = None;
        let mut tcp = None;
        for a in &addrs {
            match TcpStream::connect_timeout(a, connect_timeout) {
                Ok(s) => {
                    tcp = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let tcp = tcp.ok_or_else(|| {
            fail(format!(
                "cannot connect: {}; is the server running?",
                last.map_or_else(|| "no address".to_string(), |e| e.to_string())
            ))
        })?;
        let _ = tcp.set_nodelay(true);
        let _ = tcp.set_read_timeout(Some(connect_timeout));
        let _ = tcp.set_write_timeout(Some(connect_timeout));
        let mut req = target
            .ws
            .as_str()
            .into_client_request()
            .map_err(|e| fail(format!("bad WebSocket URL: {e}")))?;
        if let Some(t) = &config.token {
            let v = format!("Bearer {t}")
                .parse()
                .map_err(|_| fail("the token is not a valid header value".into()))?;
            req.headers_mut().insert("Authorization", v);
        }
        let ws_config = WebSocketConfig::default()
            .max_message_size(Some(100 << 20))
            .max_frame_size(Some(100 << 20));
        let (ws, _) = tungstenite::client_tls_with_config(req, tcp, Some(ws_config), None)
            .map_err(|e| match e {
                tungstenite::HandshakeError::Failure(tungstenite::Error::Http(r)) => {
                    let status = r.status().as_u16();
                    let body: String = r
                        .body()
                        .as_ref()
                        .map(|b| String::from_utf8_lossy(b).chars().take(300).collect())
                        .unwrap_or_default();
                    let hint = match status {
                        401 | 403 => {
                            "; the server wants a token: name its variable with ?token_env=VAR"
                        }
                        404 => "; the server has no /ws endpoint: is it an OpenEnv server?",
                        _ => "",
                    };
                    fail(format!(
                        "WebSocket upgrade refused with HTTP {status} {body}{hint}"
                    ))
                }
                other => fail(format!("WebSocket handshake failed: {other}")),
            })?;
        let _ = tcp_of(&ws).set_write_timeout(Some(config.timeout));
        let state = Arc::new(Mutex::new(LinkState {
            ws: Some(ws),
            broken: None,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let weak = Arc::downgrade(&state);
        let stop2 = stop.clone();
        let every = config.keepalive;
        let keepalive = std::thread::Builder::new()
            .name("nenyax-openenv-keepalive".into())
            .spawn(move || keepalive_loop(weak, stop2, every))
            .ok();
        Ok(Link {
            state,
            stop,
            keepalive,
            timeout: config.timeout,
        })
    }

    pub(super) fn broken(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .broken
            .is_some()
    }

    /// Send one frame and read its reply's `data`; error frames become typed errors.
    pub(super) fn call(&self, frame: ClientFrame, server: &str) -> Result<Value> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let lost = |why: &str| {
            Error::Environment(format!(
                "{server}: the session's connection was lost ({why}); this episode cannot \
                 continue, the next one reconnects"
            ))
        };
        if let Some(why) = &st.broken {
            return Err(lost(why));
        }
        let st = &mut *st;
        let Some(ws) = st.ws.as_mut() else {
            return Err(lost("closed"));
        };
        let _ = tcp_of(ws).set_read_timeout(Some(self.timeout));
        let deadline = Instant::now() + self.timeout;
        let result = (|| -> std::result::Result<Value, String> {
            ws.send(Message::text(frame.to_json().to_string()))
                .map_err(|e| format!("send failed: {e}"))?;
            loop {
                match ws.read() {
                    Ok(Message::Text(t)) => {
                        return serde_json::from_str::<Value>(t.as_str())
                            .map_err(|e| format!("the server sent a frame that is not JSON: {e}"))
                    }
                    Ok(Message::Close(c)) => {
                        return Err(match c {
                            Some(c) => format!("the server closed it: {} {}", c.code, c.reason),
                            None => "the server closed it".into(),
                        })
                    }
                    Ok(Message::Binary(_)) => {
                        return Err(
                            "the server sent a binary frame; OpenEnv speaks JSON text".into()
                        )
                    }
                    Ok(_) => {
                        let _ = ws.flush();
                        if Instant::now() > deadline {
                            return Err(format!(
                                "no reply within {:.0} s",
                                self.timeout.as_secs_f64()
                            ));
                        }
                    }
                    Err(e) if is_timeout(&e) => {
                        return Err(format!(
                            "no reply within {:.0} s",
                            self.timeout.as_secs_f64()
                        ))
                    }
                    Err(e) => return Err(e.to_string()),
                }
            }
        })();
        let msg = match result {
            Ok(v) => v,
            Err(why) => {
                st.broken = Some(why.clone());
                st.ws = None;
                return Err(lost(&why));
            }
        };
        let mut drop_link = |why: String| {
            st.broken = Some(why);
            st.ws = None;
        };
        match ServerFrame::parse(&msg) {
            Some(ServerFrame::Error {
                code: c,
                message: text,
                data,
            }) => {
                let details = data
                    .get("errors")
                    .map(|e| format!(": {}", crate::contract::preview(e)))
                    .unwrap_or_default();
                match c.as_str() {
                    code::CAPACITY_REACHED => {
                        drop_link("the server was at capacity".into());
                        Err(Error::Capacity {
                            server: server.to_string(),
                            message: text,
                        })
                    }
                    code::VALIDATION_ERROR => {
                        let action = match &frame {
                            ClientFrame::Step(d) | ClientFrame::Reset(d) => d.clone(),
                            _ => Value::Null,
                        };
                        Err(Error::InvalidAction {
                            env: server.to_string(),
                            action: crate::contract::preview(&action),
                            reason: format!("{text}{details}"),
                        })
                    }
                    code::FACTORY_ERROR | code::SESSION_ERROR => {
                        drop_link(c.clone());
                        Err(Error::Environment(format!(
                            "{server}: the server could not make a session ({c}): {text}"
                        )))
                    }
                    _ => Err(Error::Environment(format!(
                        "{server}: {c}: {text}{details}"
                    ))),
                }
            }
            Some(ServerFrame::Observation(data) | ServerFrame::State(data)) => Ok(data),
            _ => Err(Error::Protocol(format!(
                "{server}: unexpected reply {}",
                crate::contract::preview(&msg)
            ))),
        }
    }

    pub(super) fn close(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(mut ws) = st.ws.take() {
                let _ = tcp_of(&ws).set_read_timeout(Some(Duration::from_millis(500)));
                let _ = ws.send(Message::text(ClientFrame::Close.to_json().to_string()));
                let _ = ws.close(None);
                // Read until the server's close (or a short timeout) for a clean close.
                for _ in 0..8 {
                    if ws.read().is_err() {
                        break;
                    }
                }
            }
        }
        if let Some(h) = self.keepalive.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.keepalive.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

/// While no request is in flight, read (answering pings) and ping the server now and then, so
/// neither side's keepalive drops a session whose policy is slow.
fn keepalive_loop(state: Weak<Mutex<LinkState>>, stop: Arc<AtomicBool>, every: Duration) {
    let mut last_ping = Instant::now();
    loop {
        std::thread::park_timeout(every);
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Some(state) = state.upgrade() else { return };
        let Ok(mut st) = state.try_lock() else {
            continue; // a request is in flight: it reads, and so answers pings itself
        };
        let st = &mut *st;
        let Some(ws) = st.ws.as_mut() else { return };
        let _ = tcp_of(ws).set_read_timeout(Some(Duration::from_millis(5)));
        let mut failure = None;
        for _ in 0..16 {
            match ws.read() {
                Ok(Message::Close(_)) => {
                    failure = Some("the server closed it while idle".to_string());
                    break;
                }
                Ok(_) => continue,
                Err(e) if is_timeout(&e) => break,
                Err(e) => {
                    failure = Some(format!("{e} while idle"));
                    break;
                }
            }
        }
        if failure.is_none() && last_ping.elapsed() >= every {
            last_ping = Instant::now();
            if let Err(e) = ws.send(Message::Ping(Vec::new().into())) {
                failure = Some(format!("ping failed: {e}"));
            }
        } else if failure.is_none() {
            let _ = ws.flush();
        }
        if let Some(f) = failure {
            st.broken = Some(f);
            st.ws = None;
            return;
        }
    }
}
