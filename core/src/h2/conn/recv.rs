//! What the client does with each frame from the server.

use super::{
    Block, Conn, GoAway, Phase, Stream, CREDIT_THRESHOLD, EV_DATA, EV_END, EV_GOAWAY, EV_HEADERS,
    EV_PING, EV_REFUSED, EV_RESET, EV_SETTINGS, EV_SETTINGS_ACK, EV_TRAILERS, MAX_GOAWAY_DEBUG,
};
use crate::h2::error::{code, ProtocolError};
use crate::h2::frame::{self, kind, setting, Frame};
use crate::h2::response::{Field, FieldCheck, MAX_INTERIM};

impl Conn {
    /// Where a stream id stands for a frame of type `k` that needs an
    /// open stream: its index, or `None` for a stream we reset (the frame
    /// is ignored), or the error.
    fn open_stream_index(&self, id: u32, k: u8) -> Result<Option<usize>, ProtocolError> {
        if let Some(i) = self.streams.iter().position(|s| s.id == id) {
            return if self.streams[i].phase == Phase::Done {
                Err(ProtocolError::ClosedStream {
                    kind: k,
                    stream: id,
                })
            } else {
                Ok(Some(i))
            };
        }
        if self.reset_by_us.contains(&id) {
            return Ok(None);
        }
        if id % 2 == 0 || id >= self.next_stream {
            return Err(ProtocolError::IdleStream {
                kind: k,
                stream: id,
            });
        }
        Err(ProtocolError::ClosedStream {
            kind: k,
            stream: id,
        })
    }

    fn is_idle(&self, id: u32) -> bool {
        id % 2 == 0 || id >= self.next_stream
    }

    pub(super) fn frame(&mut self, f: Frame<'_>) -> Result<(), ProtocolError> {
        match f {
            Frame::Data {
                stream,
                end_stream,
                data,
                flow_len,
            } => self.data(stream, end_stream, data, flow_len),
            Frame::Headers {
                stream,
                end_stream,
                end_headers,
                block,
                ..
            } => {
                self.open_stream_index(stream, kind::HEADERS)?;
                self.block = Some(Block {
                    stream,
                    end_stream,
                    buf: self.spare.buf(),
                    continuations: 0,
                });
                self.fragment(block, end_headers)
            }
            Frame::Continuation {
                end_headers, block, ..
            } => {
                let max = 16 + (self.limits.max_header_list_bytes / 1024) as u32;
                if let Some(b) = &mut self.block {
                    b.continuations += 1;
                    if b.continuations > max {
                        return Err(ProtocolError::ContinuationFlood { max });
                    }
                }
                self.fragment(block, end_headers)
            }
            Frame::Priority { .. } | Frame::Unknown { .. } => self.control_frame(),
            Frame::RstStream { stream, code } => {
                self.control_frame()?;
                if let Some(s) = self.streams.iter_mut().find(|s| s.id == stream) {
                    if s.phase != Phase::Done {
                        s.phase = Phase::Done;
                        s.resp.reset = Some(code);
                        s.events |= EV_RESET;
                        s.end_sent = true;
                    }
                } else if self.is_idle(stream) {
                    return Err(ProtocolError::IdleStream {
                        kind: kind::RST_STREAM,
                        stream,
                    });
                }
                Ok(())
            }
            Frame::Settings { ack, params } => {
                self.control_frame()?;
                if ack {
                    if !self.settings_acked {
                        self.settings_acked = true;
                        self.hpack.set_cap(self.limits.header_table_size as usize);
                    }
                    self.events |= EV_SETTINGS_ACK;
                    return Ok(());
                }
                for (id, value) in params.iter() {
                    self.setting(id, value)?;
                }
                frame::put_settings_ack(&mut self.out);
                self.settings_received = true;
                self.events |= EV_SETTINGS;
                self.flush();
                Ok(())
            }
            Frame::PushPromise { .. } => Err(ProtocolError::PushPromise),
            Frame::Ping { ack, data } => {
                self.control_frame()?;
                if !ack {
                    frame::put_ping(&mut self.out, true, data);
                    self.events |= EV_PING;
                }
                Ok(())
            }
            Frame::GoAway {
                last_stream,
                code,
                debug,
            } => {
                self.control_frame()?;
                let last = self
                    .goaway
                    .as_ref()
                    .map_or(last_stream, |g| g.last_stream.min(last_stream));
                self.goaway = Some(GoAway {
                    last_stream: last,
                    code,
                    debug: debug[..debug.len().min(MAX_GOAWAY_DEBUG)].to_vec(),
                });
                self.events |= EV_GOAWAY;
                for s in &mut self.streams {
                    if s.id > last && s.phase != Phase::Done {
                        s.phase = Phase::Done;
                        s.resp.refused = true;
                        s.events |= EV_REFUSED;
                        s.end_sent = true;
                    }
                }
                Ok(())
            }
            Frame::WindowUpdate { stream, increment } => {
                self.control_frame()?;
                let inc = i64::from(increment);
                if stream == 0 {
                    self.send_window += inc;
                    if self.send_window > i64::from(frame::MAX_WINDOW) {
                        return Err(ProtocolError::WindowOverflow { stream: 0 });
                    }
                } else if let Some(s) = self.streams.iter_mut().find(|s| s.id == stream) {
                    s.send_window += inc;
                    if s.send_window > i64::from(frame::MAX_WINDOW) && s.phase != Phase::Done {
                        return Err(ProtocolError::WindowOverflow { stream });
                    }
                } else if self.is_idle(stream) {
                    return Err(ProtocolError::IdleStream {
                        kind: kind::WINDOW_UPDATE,
                        stream,
                    });
                }
                self.flush();
                Ok(())
            }
        }
    }

    fn setting(&mut self, id: u16, value: u32) -> Result<(), ProtocolError> {
        match id {
            setting::HEADER_TABLE_SIZE => self.peer.header_table_size = value,
            setting::MAX_CONCURRENT_STREAMS => self.peer.max_concurrent_streams = Some(value),
            setting::INITIAL_WINDOW_SIZE => {
                let delta = i64::from(value) - i64::from(self.peer.initial_window);
                self.peer.initial_window = value;
                for s in &mut self.streams {
                    s.send_window += delta;
                    if s.send_window > i64::from(frame::MAX_WINDOW) && s.phase != Phase::Done {
                        return Err(ProtocolError::WindowOverflow { stream: s.id });
                    }
                }
            }
            setting::MAX_FRAME_SIZE => self.peer.max_frame_size = value,
            setting::MAX_HEADER_LIST_SIZE => self.peer.max_header_list_size = Some(value),
            _ => {}
        }
        Ok(())
    }

    fn data(
        &mut self,
        stream: u32,
        end_stream: bool,
        data: &[u8],
        flow_len: u32,
    ) -> Result<(), ProtocolError> {
        let len = i64::from(flow_len);
        if len > self.recv_window {
            return Err(ProtocolError::FlowControl {
                stream: 0,
                len: flow_len,
                window: self.recv_window,
            });
        }
        self.recv_window -= len;
        self.uncredited += u64::from(flow_len);
        if data.is_empty() && !end_stream {
            self.control_frame()?;
        }
        if let Some(i) = self.open_stream_index(stream, kind::DATA)? {
            let max_body = self.limits.max_body_bytes;
            let s = &mut self.streams[i];
            if len > s.recv_window {
                return Err(ProtocolError::FlowControl {
                    stream,
                    len: flow_len,
                    window: s.recv_window,
                });
            }
            if s.phase != Phase::Body {
                return Err(ProtocolError::Malformed {
                    stream,
                    what: "DATA before the response head",
                });
            }
            s.recv_window -= len;
            s.uncredited += u64::from(flow_len);
            let keep = max_body.saturating_sub(s.resp.body.len()).min(data.len());
            s.resp.body.extend_from_slice(&data[..keep]);
            s.resp.body_len += data.len() as u64;
            if !data.is_empty() {
                s.data_unreported += data.len() as u64;
                s.events |= EV_DATA;
            }
            if end_stream {
                Self::end(&mut self.out, s);
            } else if s.uncredited >= CREDIT_THRESHOLD {
                let n = std::mem::take(&mut s.uncredited);
                frame::put_window_update(&mut self.out, stream, n as u32);
                s.recv_window += n as i64;
            }
        }
        if self.uncredited >= CREDIT_THRESHOLD {
            let n = std::mem::take(&mut self.uncredited);
            frame::put_window_update(&mut self.out, 0, n as u32);
            self.recv_window += n as i64;
        }
        Ok(())
    }

    /// The server ended the stream. A request body still unsent is
    /// dropped and the stream reset with NO_ERROR (section 8.1).
    fn end(out: &mut Vec<u8>, s: &mut Stream) {
        s.phase = Phase::Done;
        s.resp.end_stream = true;
        s.events |= EV_END;
        if !s.end_sent {
            s.end_sent = true;
            frame::put_rst_stream(out, s.id, code::NO_ERROR);
        }
    }

    /// A header block fragment of the open block.
    fn fragment(&mut self, frag: &[u8], end_headers: bool) -> Result<(), ProtocolError> {
        if frag.is_empty() && !end_headers {
            self.control_frame()?;
        }
        let max = self.limits.max_header_list_bytes;
        let Some(b) = &mut self.block else {
            return Ok(());
        };
        if b.buf.len() + frag.len() > max {
            return Err(ProtocolError::HeaderBlockTooLarge { max });
        }
        b.buf.extend_from_slice(frag);
        if end_headers {
            self.finish_block()?;
        }
        Ok(())
    }

    /// Decodes the complete block and applies it to its stream.
    fn finish_block(&mut self) -> Result<(), ProtocolError> {
        let Some(b) = self.block.take() else {
            return Ok(());
        };
        let max = self.limits.max_header_list_bytes;
        let stream = b.stream;
        let phase = self
            .streams
            .iter()
            .find(|s| s.id == stream)
            .map(|s| s.phase);
        // Checked as they decode (RFC 9113 section 8); the regular ones
        // kept when the round reads them.
        let mut check = FieldCheck::new(phase == Some(Phase::Body));
        let keep = self.limits.keep_fields && matches!(phase, Some(Phase::Head | Phase::Body));
        let mut fields: Vec<Field> = if keep { self.spare.list() } else { Vec::new() };
        let spare = &mut self.spare;
        let decoded = self.hpack.decode(&b.buf, max, |n, v| {
            if check.field(n, v) && keep && n.first() != Some(&b':') {
                fields.push(spare.field(n, v));
            }
        });
        self.spare.keep_buf(b.buf);
        decoded.map_err(ProtocolError::Hpack)?;
        let Some(s) = self.streams.iter_mut().find(|s| s.id == stream) else {
            // Reset by us (or taken while the block was open): decoded
            // only to keep the HPACK table in step.
            self.spare.keep_list(fields);
            return Ok(());
        };
        let bad = |what| ProtocolError::Malformed { stream, what };
        match s.phase {
            Phase::Head => {
                let status = check.finish().map_err(bad)?.unwrap_or(0);
                if status < 200 {
                    if status == 101 {
                        return Err(bad("101 in HTTP/2"));
                    }
                    if b.end_stream {
                        return Err(bad("1xx response with END_STREAM"));
                    }
                    s.resp.interim += 1;
                    if s.resp.interim > MAX_INTERIM {
                        return Err(bad("too many 1xx responses"));
                    }
                    self.spare.keep_list(fields);
                    return Ok(());
                }
                s.resp.status = Some(status);
                self.spare
                    .keep_list(core::mem::replace(&mut s.resp.headers, fields));
                s.phase = Phase::Body;
                s.events |= EV_HEADERS;
            }
            Phase::Body => {
                if !b.end_stream {
                    return Err(bad("trailers without END_STREAM"));
                }
                check.finish().map_err(bad)?;
                self.spare
                    .keep_list(core::mem::replace(&mut s.resp.trailers, fields));
                s.resp.has_trailers = true;
                s.events |= EV_TRAILERS;
            }
            Phase::Done => return Ok(()),
        }
        if b.end_stream {
            Self::end(&mut self.out, s);
        }
        Ok(())
    }
}
