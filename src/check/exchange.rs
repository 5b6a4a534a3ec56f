//! The probe kinds that speak an application's own protocol with a fixed
//! exchange (docs/directives.md, check: type): `type=mysql` reads the
//! server's greeting, `type=ajp` sends a CPing and expects the CPong,
//! `type=fastcgi` sends a FastCGI request and judges its `Status`. The
//! bytes and the decoders are core's (`healthcheck_core::protocols`); this
//! kind writes the request through the connection and feeds the answer to
//! the decoder as it arrives. One exchange per connection: such a
//! round's connection is never kept.

use std::rc::Rc;

use healthcheck_core::conf::StatusClasses;
use healthcheck_core::protocols::{ajp, fastcgi, mysql, Answer, Verdict};
use healthcheck_core::reason::Reason;

use super::conn::{reason_of, with_read_buffer, Io};
use super::kind::{Cx, ProbeKind};
use super::outcome::{Outcome, Step};

/// Which protocol, and what its decoder needs.
#[derive(Clone, Copy, Debug)]
pub enum Protocol {
    Mysql,
    Ajp,
    Fastcgi(StatusClasses),
}

/// One round's decoder.
enum Decoder {
    Mysql(mysql::Greeting),
    Ajp(ajp::CPong),
    Fastcgi(fastcgi::Response),
}

impl Decoder {
    fn answer(&mut self) -> &mut dyn Answer {
        match self {
            Decoder::Mysql(d) => d,
            Decoder::Ajp(d) => d,
            Decoder::Fastcgi(d) => d,
        }
    }
}

/// A fixed exchange's settings (per probe) and state (per round).
pub struct Exchange {
    protocol: Protocol,
    /// What is sent (nothing for mysql), built once per probe.
    request: Rc<[u8]>,
    /// `check_buffer_size`: what a decoder keeps at most.
    buffer_size: usize,
    decoder: Decoder,
    sent: usize,
    /// The last FastCGI status seen (the status page's `http_status`).
    status: Option<u16>,
    /// Why the last failed round failed, for the log line.
    detail: Option<String>,
}

impl Exchange {
    pub fn new(protocol: Protocol, request: Rc<[u8]>, buffer_size: usize) -> Exchange {
        Exchange {
            decoder: decoder(protocol, buffer_size),
            protocol,
            request,
            buffer_size,
            sent: 0,
            status: None,
            detail: None,
        }
    }

    fn send(&mut self, cx: &Cx) -> Step {
        while self.sent < self.request.len() {
            match cx.conn.send(&self.request[self.sent..]) {
                Io::Done(n) if n > 0 => self.sent += n,
                Io::Done(_) | Io::Again => return Step::Pending,
                Io::Error(e) => return Step::Done(Outcome::Down(reason_of(e))),
            }
        }
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
            let verdict = match cx.conn.recv(buf) {
                Io::Done(0) => self.decoder.answer().eof(),
                Io::Done(n) => self.decoder.answer().feed(&buf[..n]),
                Io::Again => return Step::Pending,
                Io::Error(e) => return Step::Done(Outcome::Down(reason_of(e))),
            };
            if let Decoder::Fastcgi(d) = &self.decoder {
                if d.status().is_some() {
                    self.status = d.status();
                }
            }
            match verdict {
                Verdict::NeedMore => {}
                Verdict::Up => {
                    return Step::Done(Outcome::Up {
                        delay_ms: cx.round.elapsed_ms(),
                    })
                }
                Verdict::Down(reason, detail) => {
                    self.detail = Some(detail);
                    return Step::Done(Outcome::Down(reason));
                }
            }
        }
    }
}

fn decoder(protocol: Protocol, buffer_size: usize) -> Decoder {
    match protocol {
        Protocol::Mysql => Decoder::Mysql(mysql::Greeting::new(buffer_size)),
        Protocol::Ajp => Decoder::Ajp(ajp::CPong::default()),
        Protocol::Fastcgi(alive) => Decoder::Fastcgi(fastcgi::Response::new(alive, buffer_size)),
    }
}

impl ProbeKind for Exchange {
    fn on_connected(&mut self, cx: &Cx) -> Step {
        self.decoder = decoder(self.protocol, self.buffer_size);
        self.sent = 0;
        cx.time_rest_of_round();
        self.send(cx)
    }

    fn on_readable(&mut self, cx: &Cx) -> Step {
        if self.sent < self.request.len() {
            return self.send(cx);
        }
        self.read(cx)
    }

    fn on_writable(&mut self, cx: &Cx) -> Step {
        if self.sent < self.request.len() {
            self.send(cx)
        } else {
            Step::Pending
        }
    }

    fn on_timeout(&mut self, _cx: &Cx) -> Step {
        Step::Done(Outcome::Down(Reason::Timeout))
    }

    fn http_status(&self) -> Option<u16> {
        self.status
    }

    fn detail(&self) -> Option<&str> {
        self.detail.as_deref()
    }

    fn on_round_start(&mut self) {
        self.detail = None;
    }
}
