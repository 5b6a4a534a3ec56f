//! The bytes of grpc.health.v1: gRPC's length-prefixed messages and the
//! two protobuf messages, hand-encoded.
//!
//! ```proto
//! message HealthCheckRequest { string service = 1; }
//! message HealthCheckResponse {
//!   enum ServingStatus { UNKNOWN = 0; SERVING = 1; NOT_SERVING = 2;
//!                        SERVICE_UNKNOWN = 3; }
//!   ServingStatus status = 1;
//! }
//! ```

/// The largest response message accepted (a HealthCheckResponse takes 2
/// bytes; unknown fields may add some).
pub const MAX_MESSAGE: usize = 4096;

/// The request's DATA: the 5-byte prefix (not compressed, big-endian
/// length) and `HealthCheckRequest { service }` (field 1 left out when
/// empty, as proto3 does).
pub fn request_body(service: &[u8]) -> Vec<u8> {
    let mut msg = Vec::with_capacity(service.len() + 6);
    if !service.is_empty() {
        msg.push(0x0a); // field 1, wire type 2
        put_varint(&mut msg, service.len() as u64);
        msg.extend_from_slice(service);
    }
    let mut out = Vec::with_capacity(msg.len() + 5);
    out.push(0);
    out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    out.extend_from_slice(&msg);
    out
}

/// Appends a protobuf varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v & 0x7f) as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Why the response's messages are refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageError {
    /// The compressed flag is 1: we sent no `grpc-accept-encoding`.
    Compressed,
    /// The compressed flag is neither 0 nor 1.
    BadFlag(u8),
    /// A message longer than the limit.
    TooLarge {
        /// Its declared length.
        len: u32,
        /// The limit.
        max: usize,
    },
    /// The body ends inside a prefix or a message.
    Truncated,
}

impl std::fmt::Display for MessageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MessageError::Compressed => write!(f, "compressed message"),
            MessageError::BadFlag(b) => write!(f, "message flag {b}"),
            MessageError::TooLarge { len, max } => {
                write!(f, "message of {len} bytes > max {max}")
            }
            MessageError::Truncated => write!(f, "truncated message"),
        }
    }
}

/// An incremental reader of length-prefixed messages: keeps the first
/// message (at most `max` bytes) and counts the others, whose bytes it
/// skips. Feed DATA in any split; the result does not depend on it.
#[derive(Clone, Debug)]
pub struct MessageReader {
    max: usize,
    prefix: [u8; 5],
    prefix_len: usize,
    /// Bytes of the current message still to come, when in one.
    left: Option<u32>,
    first: Vec<u8>,
    complete: u32,
    error: Option<MessageError>,
}

impl MessageReader {
    /// A reader refusing messages longer than `max` bytes.
    pub fn new(max: usize) -> MessageReader {
        MessageReader {
            max,
            prefix: [0; 5],
            prefix_len: 0,
            left: None,
            first: Vec::new(),
            complete: 0,
            error: None,
        }
    }

    /// Consumes body bytes. After an error, every call returns it.
    pub fn feed(&mut self, mut data: &[u8]) -> Result<(), MessageError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        while !data.is_empty() {
            match self.left {
                None => {
                    let take = (5 - self.prefix_len).min(data.len());
                    self.prefix[self.prefix_len..self.prefix_len + take]
                        .copy_from_slice(&data[..take]);
                    self.prefix_len += take;
                    data = &data[take..];
                    if self.prefix_len < 5 {
                        break;
                    }
                    self.prefix_len = 0;
                    let p = self.prefix;
                    let len = u32::from_be_bytes([p[1], p[2], p[3], p[4]]);
                    let err = match p[0] {
                        0 if len as usize > self.max => {
                            Some(MessageError::TooLarge { len, max: self.max })
                        }
                        0 => None,
                        1 => Some(MessageError::Compressed),
                        b => Some(MessageError::BadFlag(b)),
                    };
                    if let Some(e) = err {
                        self.error = Some(e);
                        return Err(e);
                    }
                    self.left = Some(len);
                    self.end_if_done();
                }
                Some(left) => {
                    let take = (left as usize).min(data.len());
                    if self.complete == 0 {
                        self.first.extend_from_slice(&data[..take]);
                    }
                    data = &data[take..];
                    self.left = Some(left - take as u32);
                    self.end_if_done();
                }
            }
        }
        Ok(())
    }

    fn end_if_done(&mut self) {
        if self.left == Some(0) {
            self.left = None;
            self.complete = self.complete.saturating_add(1);
        }
    }

    /// The body ended: an error if it ended inside a prefix or message.
    pub fn finish(&self) -> Result<(), MessageError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.prefix_len > 0 || self.left.is_some() {
            return Err(MessageError::Truncated);
        }
        Ok(())
    }

    /// How many complete messages were read.
    pub fn messages(&self) -> u32 {
        self.complete
    }

    /// The first message, once complete.
    pub fn first(&self) -> Option<&[u8]> {
        (self.complete > 0).then_some(self.first.as_slice())
    }
}

/// `HealthCheckResponse.status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServingStatus {
    /// 0, also what a message without the field means.
    Unknown,
    /// 1
    Serving,
    /// 2
    NotServing,
    /// 3 (the Watch method's answer for an unknown service)
    ServiceUnknown,
    /// A value the enum does not define.
    Other(i32),
}

impl ServingStatus {
    /// From the enum's number.
    pub fn from_i32(v: i32) -> ServingStatus {
        match v {
            0 => ServingStatus::Unknown,
            1 => ServingStatus::Serving,
            2 => ServingStatus::NotServing,
            3 => ServingStatus::ServiceUnknown,
            n => ServingStatus::Other(n),
        }
    }

    /// The enum's name (`UNKNOWN`, `SERVING`, ...), `None` for others.
    pub fn name(&self) -> Option<&'static str> {
        match self {
            ServingStatus::Unknown => Some("UNKNOWN"),
            ServingStatus::Serving => Some("SERVING"),
            ServingStatus::NotServing => Some("NOT_SERVING"),
            ServingStatus::ServiceUnknown => Some("SERVICE_UNKNOWN"),
            ServingStatus::Other(_) => None,
        }
    }
}

/// Why a protobuf message is malformed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtoError {
    /// The message ends inside a field.
    Truncated,
    /// A varint of more than 10 bytes or above `u64::MAX`.
    BadVarint,
    /// Wire type 6 or 7, or an end-group with no start.
    BadWireType(u8),
    /// Field number 0 or above 2^29-1.
    BadFieldNumber,
    /// A group whose end does not match, or nested too deep.
    BadGroup,
    /// `status` with a wire type other than varint.
    WrongWireType,
}

impl std::fmt::Display for ProtoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProtoError::Truncated => write!(f, "truncated field"),
            ProtoError::BadVarint => write!(f, "bad varint"),
            ProtoError::BadWireType(w) => write!(f, "bad wire type {w}"),
            ProtoError::BadFieldNumber => write!(f, "bad field number"),
            ProtoError::BadGroup => write!(f, "bad group"),
            ProtoError::WrongWireType => write!(f, "status is not a varint"),
        }
    }
}

/// Groups nested deeper than this are refused.
const MAX_GROUP_DEPTH: u32 = 32;

struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn varint(&mut self) -> Result<u64, ProtoError> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let b = *self.buf.get(self.at).ok_or(ProtoError::Truncated)?;
            self.at += 1;
            if i == 9 && b > 1 {
                return Err(ProtoError::BadVarint);
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(ProtoError::BadVarint)
    }

    fn skip_bytes(&mut self, n: u64) -> Result<(), ProtoError> {
        let left = (self.buf.len() - self.at) as u64;
        if n > left {
            return Err(ProtoError::Truncated);
        }
        self.at += n as usize;
        Ok(())
    }

    /// A tag: (field number, wire type).
    fn tag(&mut self) -> Result<(u32, u8), ProtoError> {
        let t = self.varint()?;
        let field = t >> 3;
        if field == 0 || field > (1 << 29) - 1 {
            return Err(ProtoError::BadFieldNumber);
        }
        Ok((field as u32, (t & 7) as u8))
    }

    /// Skips a field's value; a group up to its matching end.
    fn skip(&mut self, field: u32, wire: u8, depth: u32) -> Result<(), ProtoError> {
        match wire {
            0 => self.varint().map(drop),
            1 => self.skip_bytes(8),
            2 => {
                let n = self.varint()?;
                self.skip_bytes(n)
            }
            5 => self.skip_bytes(4),
            3 => {
                if depth >= MAX_GROUP_DEPTH {
                    return Err(ProtoError::BadGroup);
                }
                loop {
                    let (f, w) = self.tag()?;
                    if w == 4 {
                        return if f == field {
                            Ok(())
                        } else {
                            Err(ProtoError::BadGroup)
                        };
                    }
                    self.skip(f, w, depth + 1)?;
                }
            }
            w => Err(ProtoError::BadWireType(w)),
        }
    }
}

/// Decodes a HealthCheckResponse: its `status` (the last one, as protobuf
/// merges), unknown fields of every wire type skipped, groups included.
pub fn decode_health_response(msg: &[u8]) -> Result<ServingStatus, ProtoError> {
    let mut c = Cursor { buf: msg, at: 0 };
    let mut status = 0i32;
    while c.at < msg.len() {
        let (field, wire) = c.tag()?;
        if field == 1 {
            if wire != 0 {
                return Err(ProtoError::WrongWireType);
            }
            // An enum is an int32: the low 32 bits of the varint.
            status = c.varint()? as u32 as i32;
        } else {
            c.skip(field, wire, 0)?;
        }
    }
    Ok(ServingStatus::from_i32(status))
}
