//! The HTTP/2 probe: `type=grpc` / `type=grpcs` (the gRPC health check)
//! and `type=http` / `type=https` with `check_http_version 2`
//! (docs/directives.md, type=grpc and type=grpcs).
//!
//! The protocol is core's sans-I/O client (`healthcheck_core::h2`): this
//! kind writes what the client queues, feeds it what the connection reads,
//! and judges the round's stream once the client says it is over. A round
//! is one stream: on a new connection the preface, our SETTINGS and the
//! request go out together (prior knowledge, or ALPN `h2` over TLS); on a
//! kept connection (`reuse=`) the client and its HPACK state carry over
//! and the round opens the next stream. While the connection is idle what
//! the server sends (PING, SETTINGS, WINDOW_UPDATE, the late frames of a
//! cancelled stream, GOAWAY) still goes to the client, which answers it;
//! a GOAWAY or an error ends the reuse.
//!
//! Verdicts: an http round is judged as soon as its head (or the body a
//! `body` test needs) is in, and its stream is then cancelled, so nothing
//! is drained to keep the connection; a grpc round needs its trailers. A
//! protocol failure (the client's error, no SETTINGS within the round, a
//! GOAWAY or RST_STREAM for the round's stream) is `protocol`. A kept
//! connection the server no longer takes new streams on (GOAWAY, stream
//! ids used up, its stream limit) makes the round connect anew instead of
//! failing.

use std::rc::Rc;

use healthcheck_core::conf::StatusClasses;
use healthcheck_core::grpc;
use healthcheck_core::h2::{hpack, Client, Field, Limits, Response};
use healthcheck_core::matcher::{http_verdict, HeadView, RegexSet};
use healthcheck_core::reason::Reason;

use super::conn::{reason_of, with_read_buffer, Conn, Io};
use super::kind::{Cx, ProbeKind};
use super::outcome::{Outcome, Step};
use crate::match_block::CompiledMatch;

/// What the rounds ask.
pub enum Mode {
    /// The gRPC health check.
    Grpc {
        https: bool,
        authority: Vec<u8>,
        /// The request's DATA (the gRPC-framed HealthCheckRequest).
        body: Rc<[u8]>,
        /// `check_grpc_status`.
        extra_pass: Rc<[u32]>,
    },
    /// An http check over HTTP/2.
    Http {
        headers: Vec<Field>,
        expect_alive: StatusClasses,
        matcher: Option<Rc<CompiledMatch>>,
    },
}

impl Mode {
    /// The HPACK block of the fields every round sends (a grpc round adds
    /// its `grpc-timeout`).
    fn fixed_block(&self) -> Vec<u8> {
        match self {
            Mode::Grpc {
                https, authority, ..
            } => hpack::encode_block(&grpc::request_headers(
                *https,
                authority,
                healthcheck_core::http::request::USER_AGENT.as_bytes(),
                None,
            )),
            Mode::Http { headers, .. } => hpack::encode_block(headers),
        }
    }
}

/// The probe's settings (per probe) and the connection's and round's state.
pub struct H2 {
    mode: Mode,
    limits: Limits,
    /// [`Mode::fixed_block`], encoded once.
    fixed: Vec<u8>,
    /// The round's block: `fixed` and the round's own fields.
    block: Vec<u8>,
    /// The connection's client: made on a new connection, kept with it
    /// (boxed: a probe holds one kind, most of them small).
    client: Option<Box<Client>>,
    /// The round's stream.
    stream: Option<u32>,
    /// The round runs on a kept connection.
    reused: bool,
    /// The round ended with its stream taken and the connection sound.
    clean: bool,
    /// An http round judged up before its stream ended (the delay): the
    /// rest is read when the connection is kept.
    up: Option<u64>,
    /// The last `:status` seen.
    status: Option<u16>,
    /// The last `grpc-status` seen.
    grpc_status: Option<u32>,
    /// Why the last failed round failed, for the log line.
    detail: Option<String>,
}

impl H2 {
    pub fn new(mode: Mode, buffer_size: usize) -> H2 {
        let body = match &mode {
            // The whole message must be judged (5-byte prefix + message).
            Mode::Grpc { .. } => buffer_size.max(5 + grpc::MAX_MESSAGE),
            Mode::Http { matcher, .. } => match matcher {
                Some(m) if m.block.needs_body() => buffer_size,
                _ => 0,
            },
        };
        // Fields are read by gRPC verdicts and match blocks alone.
        let keep_fields = match &mode {
            Mode::Grpc { .. } => true,
            Mode::Http { matcher, .. } => matcher.is_some(),
        };
        let limits = Limits {
            max_header_list_bytes: buffer_size,
            max_body_bytes: body,
            keep_fields,
            ..Limits::default()
        };
        H2 {
            fixed: mode.fixed_block(),
            block: Vec::new(),
            mode,
            limits,
            client: None,
            stream: None,
            reused: false,
            clean: false,
            up: None,
            status: None,
            grpc_status: None,
            detail: None,
        }
    }

    /// The HealthCheckRequest's DATA for `service`.
    pub fn grpc_body(service: &[u8]) -> Rc<[u8]> {
        grpc::request_body(service).into()
    }

    fn fail(&mut self, reason: Reason, detail: impl Into<String>) -> Step {
        self.detail = Some(detail.into());
        Step::Done(Outcome::Down(reason))
    }

    /// Open the round's stream and send what the client queued.
    fn begin(&mut self, cx: &Cx) -> Step {
        self.clean = false;
        self.stream = None;
        self.up = None;
        cx.time_rest_of_round();
        let left = cx.conf.timeout_ms.saturating_sub(cx.round.elapsed_ms());
        self.block.clear();
        self.block.extend_from_slice(&self.fixed);
        let body: &[u8] = match &self.mode {
            Mode::Grpc { body, .. } => {
                let timeout = grpc::timeout_value(left.max(1));
                hpack::encode_field(&mut self.block, b"grpc-timeout", timeout.as_bytes());
                body
            }
            Mode::Http { .. } => &[],
        };
        let Some(client) = self.client.as_mut() else {
            return Step::Done(Outcome::Down(Reason::Error));
        };
        client.begin_round();
        match client.open_stream_encoded(&self.block, body) {
            Ok(id) => self.stream = Some(id),
            // The server takes no new stream here: a new connection.
            Err(_) if self.reused => return Step::Reconnect,
            Err(e) => return self.fail(Reason::Protocol, format!("no stream: {e:?}")),
        }
        if let Some(step) = self.flush(cx) {
            return step;
        }
        if cx.conn.read_ready() {
            self.read(cx)
        } else {
            Step::Pending
        }
    }

    /// The round runs on a kept connection and nothing of its stream came
    /// yet (a connection lost while idle, not a failure of the peer).
    fn untouched(&self) -> bool {
        self.reused
            && self.stream.is_some_and(|id| {
                self.client
                    .as_ref()
                    .and_then(|c| c.response(id))
                    .is_some_and(|r| r.status.is_none() && r.interim == 0)
            })
    }

    /// Write what the client queued; `Some` when the round ends.
    fn flush(&mut self, cx: &Cx) -> Option<Step> {
        let client = self.client.as_mut()?;
        while !client.output().is_empty() {
            match cx.conn.send(client.output()) {
                Io::Done(n) if n > 0 => client.consume_output(n),
                // The write event comes when the socket takes more.
                Io::Done(_) | Io::Again => return None,
                Io::Error(_) if self.untouched() => return Some(Step::Reconnect),
                Io::Error(e) => return Some(Step::Done(Outcome::Down(reason_of(e)))),
            }
        }
        None
    }

    fn read(&mut self, cx: &Cx) -> Step {
        with_read_buffer(|buf| self.read_into(cx, buf))
    }

    fn read_into(&mut self, cx: &Cx, buf: &mut [u8]) -> Step {
        loop {
            let n = match cx.conn.recv(buf) {
                Io::Done(0) => {
                    if let Some(step) = self.judge_if_closed(cx) {
                        return step;
                    }
                    // A kept connection the server closed before it
                    // answered anything of this round: a new one.
                    if self.untouched() {
                        return Step::Reconnect;
                    }
                    return self.fail(Reason::Closed, "connection closed by peer");
                }
                Io::Done(n) => n,
                Io::Again => return Step::Pending,
                Io::Error(_) if self.untouched() => return Step::Reconnect,
                Io::Error(e) => return Step::Done(Outcome::Down(reason_of(e))),
            };
            let Some(client) = self.client.as_mut() else {
                return Step::Done(Outcome::Down(Reason::Error));
            };
            if let Err(e) = client.feed(&buf[..n]) {
                let detail = e.to_string();
                // Our GOAWAY, if the socket takes it.
                let _ = self.flush(cx);
                return self.fail(Reason::Protocol, detail);
            }
            if let Some(step) = self.flush(cx) {
                return step;
            }
            if let Some(step) = self.judge_if_closed(cx) {
                return step;
            }
        }
    }

    /// The round's end, if its stream tells it now.
    fn judge_if_closed(&mut self, cx: &Cx) -> Option<Step> {
        let id = self.stream?;
        let client = self.client.as_ref()?;
        let resp = client.response(id)?;
        if resp.status.is_some() {
            self.status = resp.status;
        }
        let closed = resp.closed();
        let ready = match &self.mode {
            Mode::Grpc { .. } => closed,
            Mode::Http { matcher, .. } => {
                let needs_body = matcher.as_ref().is_some_and(|m| m.block.needs_body());
                closed
                    || (resp.status.is_some()
                        && (!needs_body || resp.body.len() >= self.limits.max_body_bytes))
            }
        };
        if !ready {
            return None;
        }
        if self.up.is_some() && !closed {
            // Judged; the rest of the response is still coming.
            return None;
        }
        // An http round judged on its head: on a connection that is kept
        // the rest of the response is read (no RST_STREAM, no late frames
        // to meet while idle), else the stream is cancelled now.
        if self.up.is_none() && !closed && cx.keep && matches!(self.mode, Mode::Http { .. }) {
            // Judged where it is: the client is set aside meanwhile.
            let client = self.client.take();
            let step = match client.as_ref().and_then(|c| c.response(id)) {
                Some(resp) => self.verdict(resp, cx),
                None => Step::Done(Outcome::Down(Reason::Invalid)),
            };
            self.client = client;
            return match step {
                Step::Done(Outcome::Up { delay_ms }) => {
                    self.up = Some(delay_ms);
                    None
                }
                down => {
                    if let Some(resp) = self.take_stream(id) {
                        if let Some(c) = self.client.as_mut() {
                            c.recycle(resp);
                        }
                    }
                    Some(down)
                }
            };
        }
        let resp = self.take_stream(id)?;
        if resp.refused && self.reused {
            return Some(Step::Reconnect);
        }
        let step = match self.up.take() {
            Some(delay_ms) => Step::Done(Outcome::Up { delay_ms }),
            None => self.verdict(&resp, cx),
        };
        if let Some(c) = self.client.as_mut() {
            c.recycle(resp);
        }
        if let Some(end) = self.flush(cx) {
            return Some(end);
        }
        let sound = self
            .client
            .as_ref()
            .is_some_and(|c| c.error().is_none() && c.goaway().is_none());
        self.clean = sound && matches!(step, Step::Done(Outcome::Up { .. }));
        Some(step)
    }

    /// End the round's stream (cancelled if the server has not ended it).
    fn take_stream(&mut self, id: u32) -> Option<Response> {
        self.stream = None;
        self.client.as_mut()?.take_response(id)
    }

    fn verdict(&mut self, resp: &Response, cx: &Cx) -> Step {
        let delay_ms = cx.round.elapsed_ms();
        match &self.mode {
            Mode::Grpc { extra_pass, .. } => {
                let v = grpc::verdict(resp, extra_pass);
                if v.grpc_status.is_some() {
                    self.grpc_status = v.grpc_status;
                }
                match v.result {
                    Ok(()) => Step::Done(Outcome::Up { delay_ms }),
                    Err((reason, detail)) => {
                        let detail = match (&v.message, reason) {
                            (Some(m), Reason::Status) if !m.is_empty() => {
                                format!("{detail}: {m}")
                            }
                            _ => detail,
                        };
                        self.fail(reason, detail)
                    }
                }
            }
            Mode::Http {
                expect_alive,
                matcher,
                ..
            } => {
                if let Some(code) = resp.reset {
                    let name = healthcheck_core::h2::code::name(code);
                    return self.fail(Reason::Protocol, format!("stream reset ({name})"));
                }
                if resp.refused {
                    return self.fail(Reason::Protocol, "stream refused (GOAWAY)");
                }
                let Some(status) = resp.status else {
                    return self.fail(Reason::Invalid, "no response head");
                };
                let view = HeadView {
                    status,
                    headers: &resp.headers,
                };
                let block = matcher.as_deref();
                let verdict = http_verdict(
                    block.map(|m| &m.block),
                    *expect_alive,
                    &view,
                    &resp.body,
                    match block {
                        Some(m) => &m.regexes,
                        None => &NoRegexes,
                    },
                );
                match verdict {
                    Ok(()) => Step::Done(Outcome::Up { delay_ms }),
                    Err(Reason::Status) => self.fail(Reason::Status, format!("HTTP {status}")),
                    Err(r) => Step::Done(Outcome::Down(r)),
                }
            }
        }
    }
}

/// No regexes: a verdict without a `check_match` block asks none.
struct NoRegexes;

impl RegexSet for NoRegexes {
    fn is_match(&self, _id: usize, _subject: &[u8]) -> bool {
        false
    }
}

impl ProbeKind for H2 {
    fn on_connected(&mut self, cx: &Cx) -> Step {
        self.reused = false;
        cx.conn.set_nodelay();
        let mut client = Client::new(self.limits);
        client.start();
        self.client = Some(Box::new(client));
        self.begin(cx)
    }

    fn on_reused(&mut self, cx: &Cx) -> Step {
        let open = self.client.as_ref().is_some_and(|c| c.can_open_stream());
        if !open {
            return Step::Reconnect;
        }
        self.reused = true;
        self.begin(cx)
    }

    fn on_readable(&mut self, cx: &Cx) -> Step {
        self.read(cx)
    }

    fn on_writable(&mut self, cx: &Cx) -> Step {
        match self.flush(cx) {
            Some(step) => step,
            None => Step::Pending,
        }
    }

    fn on_timeout(&mut self, _cx: &Cx) -> Step {
        self.clean = false;
        if let Some(delay_ms) = self.up.take() {
            // Judged up; the rest of the response did not come in time:
            // the connection is not kept.
            return Step::Done(Outcome::Up { delay_ms });
        }
        let Some(client) = self.client.as_ref() else {
            return self.fail(Reason::Timeout, Reason::Timeout.describe());
        };
        if !client.settings_received() {
            return self.fail(Reason::Protocol, "no SETTINGS from the server in time");
        }
        if self.stream.is_some_and(|id| client.send_blocked(id)) {
            return self.fail(
                Reason::Timeout,
                "timed out: the server's flow-control window kept the request from going",
            );
        }
        self.fail(Reason::Timeout, Reason::Timeout.describe())
    }

    fn may_keep(&self) -> bool {
        self.clean
    }

    fn http_status(&self) -> Option<u16> {
        self.status
    }

    fn grpc_status(&self) -> Option<u32> {
        self.grpc_status
    }

    fn detail(&self) -> Option<&str> {
        self.detail.as_deref()
    }

    fn on_round_start(&mut self) {
        self.detail = None;
    }

    fn reuse_with_pending_data(&self) -> bool {
        false
    }

    fn idle_data(&mut self, data: &[u8], c: Conn) -> Option<bool> {
        let Some(client) = self.client.as_mut() else {
            return Some(false);
        };
        if client.feed(data).is_err() || client.goaway().is_some() {
            return Some(false);
        }
        // Acknowledgements and window updates go out at once; a socket
        // that does not take them ends the reuse.
        while !client.output().is_empty() {
            match c.send(client.output()) {
                Io::Done(n) if n > 0 => client.consume_output(n),
                _ => return Some(false),
            }
        }
        Some(true)
    }
}
