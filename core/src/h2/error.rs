//! Why an HTTP/2 connection failed, and the protocol's error codes.

use super::frame::kind;
use super::hpack::HpackError;

/// HTTP/2 error codes (RFC 9113 section 7).
pub mod code {
    /// NO_ERROR
    pub const NO_ERROR: u32 = 0x0;
    /// PROTOCOL_ERROR
    pub const PROTOCOL_ERROR: u32 = 0x1;
    /// INTERNAL_ERROR
    pub const INTERNAL_ERROR: u32 = 0x2;
    /// FLOW_CONTROL_ERROR
    pub const FLOW_CONTROL_ERROR: u32 = 0x3;
    /// SETTINGS_TIMEOUT
    pub const SETTINGS_TIMEOUT: u32 = 0x4;
    /// STREAM_CLOSED
    pub const STREAM_CLOSED: u32 = 0x5;
    /// FRAME_SIZE_ERROR
    pub const FRAME_SIZE_ERROR: u32 = 0x6;
    /// REFUSED_STREAM
    pub const REFUSED_STREAM: u32 = 0x7;
    /// CANCEL
    pub const CANCEL: u32 = 0x8;
    /// COMPRESSION_ERROR
    pub const COMPRESSION_ERROR: u32 = 0x9;
    /// CONNECT_ERROR
    pub const CONNECT_ERROR: u32 = 0xa;
    /// ENHANCE_YOUR_CALM
    pub const ENHANCE_YOUR_CALM: u32 = 0xb;
    /// INADEQUATE_SECURITY
    pub const INADEQUATE_SECURITY: u32 = 0xc;
    /// HTTP_1_1_REQUIRED
    pub const HTTP_1_1_REQUIRED: u32 = 0xd;

    /// The code's name, `UNKNOWN` for codes the RFC does not define.
    pub const fn name(c: u32) -> &'static str {
        match c {
            NO_ERROR => "NO_ERROR",
            PROTOCOL_ERROR => "PROTOCOL_ERROR",
            INTERNAL_ERROR => "INTERNAL_ERROR",
            FLOW_CONTROL_ERROR => "FLOW_CONTROL_ERROR",
            SETTINGS_TIMEOUT => "SETTINGS_TIMEOUT",
            STREAM_CLOSED => "STREAM_CLOSED",
            FRAME_SIZE_ERROR => "FRAME_SIZE_ERROR",
            REFUSED_STREAM => "REFUSED_STREAM",
            CANCEL => "CANCEL",
            COMPRESSION_ERROR => "COMPRESSION_ERROR",
            CONNECT_ERROR => "CONNECT_ERROR",
            ENHANCE_YOUR_CALM => "ENHANCE_YOUR_CALM",
            INADEQUATE_SECURITY => "INADEQUATE_SECURITY",
            HTTP_1_1_REQUIRED => "HTTP_1_1_REQUIRED",
            _ => "UNKNOWN",
        }
    }
}

/// What the server did wrong; the connection cannot go on. The engine
/// fails the round (as `invalid`, or `protocol`) and closes the
/// connection, after writing the GOAWAY the client queued, if it can.
///
/// [`std::fmt::Display`] gives a short detail for the error log, e.g.
/// `frame of 20000 bytes > max 16384`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProtocolError {
    /// The reply starts with `HTTP/`: an HTTP/1.x server.
    NotHttp2,
    /// The server's first frame is not SETTINGS (section 3.4).
    FirstNotSettings {
        /// Its type.
        kind: u8,
    },
    /// A frame longer than our `SETTINGS_MAX_FRAME_SIZE`.
    FrameTooLarge {
        /// Its length.
        len: u32,
        /// Ours.
        max: u32,
    },
    /// A frame whose length its type does not allow.
    FrameSize {
        /// Its type.
        kind: u8,
        /// Its length.
        len: u32,
    },
    /// A frame on a stream its type does not allow (0, or not 0).
    BadStreamId {
        /// Its type.
        kind: u8,
        /// The stream.
        stream: u32,
    },
    /// A pad length that leaves no room.
    BadPadding {
        /// The frame's type.
        kind: u8,
    },
    /// A SETTINGS value out of range (or ENABLE_PUSH from a server).
    BadSetting {
        /// The parameter.
        id: u16,
        /// Its value.
        value: u32,
    },
    /// A WINDOW_UPDATE of 0.
    ZeroWindowIncrement {
        /// The stream, 0 for the connection.
        stream: u32,
    },
    /// A frame other than CONTINUATION inside a header block.
    ExpectedContinuation {
        /// Its type.
        kind: u8,
        /// The stream of the open block.
        stream: u32,
    },
    /// A CONTINUATION that does not follow HEADERS.
    UnexpectedContinuation {
        /// Its stream.
        stream: u32,
    },
    /// A header block's encoded size passed the limit.
    HeaderBlockTooLarge {
        /// The limit.
        max: usize,
    },
    /// More CONTINUATION frames in one block than the limit.
    ContinuationFlood {
        /// The limit.
        max: u32,
    },
    /// The block could not be decoded (or decodes past the limit).
    Hpack(HpackError),
    /// More control frames in one round than allowed.
    TooManyControlFrames {
        /// The limit.
        max: u32,
    },
    /// PUSH_PROMISE although we disabled push.
    PushPromise,
    /// A frame on a stream that is closed.
    ClosedStream {
        /// Its type.
        kind: u8,
        /// The stream.
        stream: u32,
    },
    /// A frame on a stream we never opened.
    IdleStream {
        /// Its type.
        kind: u8,
        /// The stream.
        stream: u32,
    },
    /// The server sent more than the window we gave it.
    FlowControl {
        /// The stream, 0 for the connection window.
        stream: u32,
        /// The DATA frame's length.
        len: u32,
        /// The window left.
        window: i64,
    },
    /// A WINDOW_UPDATE or SETTINGS_INITIAL_WINDOW_SIZE that takes a send
    /// window above 2^31-1.
    WindowOverflow {
        /// The stream, 0 for the connection.
        stream: u32,
    },
    /// A malformed response (RFC 9113 section 8.1.1): pseudo-headers,
    /// field names or values, message framing.
    Malformed {
        /// The stream.
        stream: u32,
        /// What is wrong.
        what: &'static str,
    },
}

impl ProtocolError {
    /// The error code the GOAWAY we send carries.
    pub fn code(&self) -> u32 {
        use ProtocolError::*;
        match self {
            FrameTooLarge { .. } | FrameSize { .. } => code::FRAME_SIZE_ERROR,
            Hpack(HpackError::ListTooLarge { .. }) => code::ENHANCE_YOUR_CALM,
            Hpack(_) => code::COMPRESSION_ERROR,
            HeaderBlockTooLarge { .. } | ContinuationFlood { .. } | TooManyControlFrames { .. } => {
                code::ENHANCE_YOUR_CALM
            }
            BadSetting {
                id: super::frame::setting::INITIAL_WINDOW_SIZE,
                ..
            }
            | FlowControl { .. }
            | WindowOverflow { .. } => code::FLOW_CONTROL_ERROR,
            ClosedStream { .. } => code::STREAM_CLOSED,
            _ => code::PROTOCOL_ERROR,
        }
    }
}

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use ProtocolError::*;
        let name = kind::name;
        match self {
            NotHttp2 => write!(f, "server answered in HTTP/1.x"),
            FirstNotSettings { kind } => {
                write!(f, "first frame is {}, not SETTINGS", name(*kind))
            }
            FrameTooLarge { len, max } => write!(f, "frame of {len} bytes > max {max}"),
            FrameSize { kind, len } => write!(f, "{} of {len} bytes", name(*kind)),
            BadStreamId { kind, stream } => write!(f, "{} on stream {stream}", name(*kind)),
            BadPadding { kind } => write!(f, "{} padding longer than payload", name(*kind)),
            BadSetting { id, value } => write!(f, "SETTINGS parameter {id} = {value}"),
            ZeroWindowIncrement { stream } => {
                write!(f, "WINDOW_UPDATE of 0 on stream {stream}")
            }
            ExpectedContinuation { kind, stream } => {
                write!(
                    f,
                    "{} inside the header block of stream {stream}",
                    name(*kind)
                )
            }
            UnexpectedContinuation { stream } => {
                write!(f, "CONTINUATION not following HEADERS on stream {stream}")
            }
            HeaderBlockTooLarge { max } => write!(f, "header block over {max} bytes"),
            ContinuationFlood { max } => {
                write!(f, "CONTINUATION flood (over {max} in one header block)")
            }
            Hpack(e) => write!(f, "{e}"),
            TooManyControlFrames { max } => write!(
                f,
                "too many control frames (SETTINGS/PING/...) in one round (max {max})"
            ),
            PushPromise => write!(f, "PUSH_PROMISE with push disabled"),
            ClosedStream { kind, stream } => {
                write!(f, "{} on closed stream {stream}", name(*kind))
            }
            IdleStream { kind, stream } => write!(f, "{} on idle stream {stream}", name(*kind)),
            FlowControl {
                stream: 0,
                len,
                window,
            } => write!(f, "DATA of {len} bytes > connection window {window}"),
            FlowControl {
                stream,
                len,
                window,
            } => write!(
                f,
                "DATA of {len} bytes > window {window} on stream {stream}"
            ),
            WindowOverflow { stream: 0 } => write!(f, "connection send window above 2^31-1"),
            WindowOverflow { stream } => {
                write!(f, "send window of stream {stream} above 2^31-1")
            }
            Malformed { stream, what } => {
                write!(f, "malformed response on stream {stream}: {what}")
            }
        }
    }
}

impl std::error::Error for ProtocolError {}
