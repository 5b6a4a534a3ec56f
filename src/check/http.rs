//! The HTTP probe (`type=http`): one HTTP/1.x request per round and a
//! verdict on the response (docs/directives.md, type=http).
//!
//! After the connect (or on a kept connection) the request is written
//! through the connection; the response is fed, as it arrives, to core's
//! incremental parser (`healthcheck_core::http::response`), which holds at
//! most `check_buffer_size` of head and of body. The verdict comes as soon
//! as it can: after the head, or once the body a `body` test needs has
//! arrived (its first `check_buffer_size` bytes). A connection the engine
//! will keep is read to the end of the response first (within the round's
//! timeout); only a complete response that allows keep-alive, with nothing
//! after it, leaves a connection fit for the next round.

use std::rc::Rc;

use healthcheck_core::conf::StatusClasses;
use healthcheck_core::http::response::{Config, Invalid, Parser, State};
use healthcheck_core::matcher::{http_verdict, HeadView, RegexSet, Test};
use healthcheck_core::reason::Reason;

use super::conn::{reason_of, with_read_buffer, Io};
use super::kind::{Cx, ProbeKind};
use super::outcome::{Outcome, Step};
use crate::match_block::CompiledMatch;

/// An http round's settings (per probe) and state (per round).
pub struct Http {
    /// The request bytes, built once per probe.
    request: Rc<[u8]>,
    expect_alive: StatusClasses,
    buffer_size: usize,
    head_request: bool,
    matcher: Option<Rc<CompiledMatch>>,
    /// Bytes of the request written this round.
    sent: usize,
    parser: Parser,
    /// Decided: healthy (the rest of the response is being drained).
    up: Option<u64>,
    /// The last status code seen (for the status page and the log).
    status: Option<u16>,
    /// The connection may serve the next round.
    reusable: bool,
}

impl Http {
    pub fn new(
        request: Rc<[u8]>,
        expect_alive: StatusClasses,
        buffer_size: usize,
        matcher: Option<Rc<CompiledMatch>>,
    ) -> Http {
        let head_request = request.starts_with(b"HEAD ");
        let parser = Parser::new(parser_config(
            buffer_size,
            head_request,
            matcher.as_deref(),
            expect_alive,
        ));
        Http {
            request,
            expect_alive,
            buffer_size,
            head_request,
            matcher,
            sent: 0,
            parser,
            up: None,
            status: None,
            reusable: false,
        }
    }

    fn start(&mut self, cx: &Cx) -> Step {
        self.sent = 0;
        self.up = None;
        self.reusable = false;
        self.parser = Parser::new(parser_config(
            self.buffer_size,
            self.head_request,
            self.matcher.as_deref(),
            self.expect_alive,
        ));
        cx.time_rest_of_round();
        self.send(cx)
    }

    fn send(&mut self, cx: &Cx) -> Step {
        while self.sent < self.request.len() {
            match cx.conn.send(&self.request[self.sent..]) {
                Io::Done(n) if n > 0 => self.sent += n,
                Io::Done(_) | Io::Again => return Step::Pending,
                Io::Error(e) => return Step::Done(Outcome::Down(reason_of(e))),
            }
        }
        // The response is read when it can be there: the read event says
        // so (a kept connection's last read ended in EAGAIN; the response
        // raises the event when it arrives).
        if cx.conn.read_ready() {
            self.read(cx)
        } else {
            Step::Pending
        }
    }

    fn read(&mut self, cx: &Cx) -> Step {
        with_read_buffer(|buf| self.read_into(cx, buf))
    }

    fn read_into(&mut self, cx: &Cx, buf: &mut [u8]) -> Step {
        loop {
            match cx.conn.recv(buf) {
                Io::Done(0) => {
                    self.parser.eof();
                    return self.judge(cx).unwrap_or(Step::Pending);
                }
                Io::Done(n) => {
                    self.parser.feed(&buf[..n]);
                    if let Some(step) = self.judge(cx) {
                        return step;
                    }
                }
                Io::Again => return Step::Pending,
                Io::Error(e) => {
                    return match self.up {
                        Some(delay_ms) => Step::Done(Outcome::Up { delay_ms }),
                        None => Step::Done(Outcome::Down(reason_of(e))),
                    }
                }
            }
        }
    }

    /// The round's end, if the response tells it now.
    fn judge(&mut self, cx: &Cx) -> Option<Step> {
        let state = self.parser.state();
        if let Some(head) = self.parser.head() {
            self.status = Some(head.status);
        }
        match state {
            State::NeedMore => return None,
            State::Invalid(why) => {
                // A response cut short is `closed`; anything else `invalid`.
                // After an `up` verdict a broken rest only costs the
                // connection.
                return Some(Step::Done(match self.up {
                    Some(delay_ms) => Outcome::Up { delay_ms },
                    None if why == Invalid::Truncated => Outcome::Down(Reason::Closed),
                    None => Outcome::Down(Reason::Invalid),
                }));
            }
            State::Body | State::Complete => {}
        }
        if self.up.is_none() {
            let block = self.matcher.as_deref();
            if block.is_some_and(|m| m.block.needs_body()) && !self.parser.body_settled() {
                return None;
            }
            let head = self.parser.head()?;
            let headers: Vec<(Vec<u8>, Vec<u8>)> = if block.is_some() {
                head.headers()
                    .map(|(n, v)| (n.to_vec(), v.to_vec()))
                    .collect()
            } else {
                Vec::new()
            };
            let view = HeadView {
                status: head.status,
                headers: &headers,
            };
            let verdict = http_verdict(
                block.map(|m| &m.block),
                self.expect_alive,
                &view,
                self.parser.body(),
                match block {
                    Some(m) => &m.regexes,
                    None => &NoRegexes,
                },
            );
            if let Err(r) = verdict {
                return Some(Step::Done(Outcome::Down(r)));
            }
            self.up = Some(cx.round.elapsed_ms());
        }
        let delay_ms = self.up.unwrap_or(0);
        if state == State::Complete {
            self.reusable = self.parser.reusable();
            return Some(Step::Done(Outcome::Up { delay_ms }));
        }
        if cx.keep {
            // Drain the rest, so the connection can serve the next round.
            return None;
        }
        Some(Step::Done(Outcome::Up { delay_ms }))
    }
}

/// No regexes: the verdict without a `check_match` block asks none.
struct NoRegexes;

impl RegexSet for NoRegexes {
    fn is_match(&self, _id: usize, _subject: &[u8]) -> bool {
        false
    }
}

fn parser_config(
    buffer_size: usize,
    head_request: bool,
    m: Option<&CompiledMatch>,
    expect_alive: StatusClasses,
) -> Config {
    // A 101 is the answer when the check accepts it: http_1xx without a
    // block, or a block's status test (a websocket upgrade check).
    let final_101 = match m {
        None => expect_alive.accepts(101),
        Some(m) => m.block.tests.iter().any(|t| match t {
            Test::Status { negated, ranges } => {
                ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&101)) != *negated
            }
            _ => false,
        }),
    };
    Config {
        final_101,
        max_head: buffer_size,
        body_keep: if m.is_some_and(|m| m.block.needs_body()) {
            buffer_size
        } else {
            0
        },
        head_request,
    }
}

impl ProbeKind for Http {
    fn on_connected(&mut self, cx: &Cx) -> Step {
        self.start(cx)
    }

    fn on_readable(&mut self, cx: &Cx) -> Step {
        self.read(cx)
    }

    fn on_writable(&mut self, cx: &Cx) -> Step {
        if self.sent < self.request.len() {
            self.send(cx)
        } else {
            Step::Pending
        }
    }

    /// No verdict in time (or the rest of a response not drained in time:
    /// healthy, but the connection is not kept).
    fn on_timeout(&mut self, _cx: &Cx) -> Step {
        self.reusable = false;
        Step::Done(match self.up {
            Some(delay_ms) => Outcome::Up { delay_ms },
            None => Outcome::Down(Reason::Timeout),
        })
    }

    fn may_keep(&self) -> bool {
        self.reusable && self.up.is_some()
    }

    fn http_status(&self) -> Option<u16> {
        self.status
    }

    fn reuse_with_pending_data(&self) -> bool {
        false
    }
}
