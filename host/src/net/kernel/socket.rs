//! A blocking rtnetlink socket: one request at a time, answered in full
//! before the next one is sent.
#![allow(clippy::disallowed_types)] // the one place allowed

use std::io;

use netlink_packet_core::{
    NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_ACK_TLVS,
    NLM_F_CAPPED, NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_REQUEST,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

/// A failed request: errno and the kernel's extended-ack text when it gave
/// one (`"MTU less than device minimum"`), else the errno's description.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct NlError {
    pub errno: i32,
    pub msg: String,
}

impl NlError {
    fn new(errno: i32, msg: impl Into<String>) -> Self {
        NlError {
            errno,
            msg: msg.into(),
        }
    }

    fn io(e: &io::Error) -> Self {
        NlError::new(e.raw_os_error().unwrap_or(libc::EIO), e.to_string())
    }
}

/// Extended-ack attribute carrying the error text.
const NLMSGERR_ATTR_MSG: u16 = 1;
/// A dump interrupted by concurrent changes (or a lost reply) is retried this
/// many times before giving up.
const DUMP_ATTEMPTS: usize = 5;

pub(super) struct NlSocket {
    sock: Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl NlSocket {
    /// Opens a socket in the calling thread's network namespace, which it
    /// stays bound to for its whole life.
    pub fn new() -> io::Result<Self> {
        let mut sock = Socket::new(NETLINK_ROUTE)?;
        sock.bind_auto()?;
        sock.connect(&SocketAddr::new(0, 0))?;
        // Ask for error text, and for errors to echo only our header back.
        // Both are optional: errors are still understood without them.
        let _ = sock.set_ext_ack(true);
        let _ = sock.set_cap_ack(true);
        Ok(NlSocket {
            sock,
            seq: 0,
            buf: vec![0; 64 * 1024],
        })
    }

    /// Send a change and wait for its acknowledgement.
    pub fn ack(&mut self, msg: RouteNetlinkMessage, flags: u16) -> Result<(), NlError> {
        self.exchange(msg, NLM_F_ACK | flags).map(|_| ())
    }

    /// Send a `GET` for one object; the reply is that object.
    pub fn get(&mut self, msg: RouteNetlinkMessage) -> Result<RouteNetlinkMessage, NlError> {
        self.exchange(msg, NLM_F_ACK)?
            .into_iter()
            .next()
            .ok_or_else(|| NlError::new(libc::EPROTO, "netlink: empty reply"))
    }

    /// Dump every object of a kind.
    pub fn dump(&mut self, msg: RouteNetlinkMessage) -> Result<Vec<RouteNetlinkMessage>, NlError> {
        let mut last = NlError::new(libc::EINTR, "netlink dump interrupted");
        for _ in 0..DUMP_ATTEMPTS {
            match self.exchange(msg.clone(), NLM_F_DUMP) {
                Ok(v) => return Ok(v),
                // Nothing was changed by a dump, so retrying is safe.
                Err(e) if e.errno == libc::EINTR || e.errno == libc::ENOBUFS => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    fn exchange(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<Vec<RouteNetlinkMessage>, NlError> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | flags;
        header.sequence_number = seq;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::from(msg));
        packet.finalize();
        let mut out = vec![0u8; packet.buffer_len()];
        packet.serialize(&mut out);
        self.sock.send(&out, 0).map_err(|e| NlError::io(&e))?;
        self.receive(seq, flags & NLM_F_DUMP != 0)
    }

    /// Read until the request `seq` is finished: `NLMSG_DONE` for a dump, the
    /// ack (or error) otherwise. It always reads to the end, even past an
    /// error, so that the next request starts on a quiet socket; replies to
    /// earlier requests (from an aborted exchange) are skipped by sequence.
    fn receive(&mut self, seq: u32, dump: bool) -> Result<Vec<RouteNetlinkMessage>, NlError> {
        let mut out = Vec::new();
        let mut failure: Option<NlError> = None;
        let mut interrupted = false;
        loop {
            let len = match self.recv_datagram() {
                Ok(len) => len,
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    // The socket overflowed and replies were lost. For a
                    // dump, the caller retries. For a change, the outcome is
                    // unknown; say so rather than guess.
                    let msg = if dump {
                        "netlink reply lost (receive buffer overrun)"
                    } else {
                        "netlink reply lost (receive buffer overrun): the change may or may not have been applied"
                    };
                    return Err(NlError::new(libc::ENOBUFS, msg));
                }
                Err(e) => return Err(NlError::io(&e)),
            };
            let mut off = 0;
            while off < len {
                let data = &self.buf[off..len];
                let msg_len = NetlinkBuffer::new_checked(data)
                    .map(|b| b.length() as usize)
                    .map_err(|e| NlError::new(libc::EBADMSG, format!("netlink: {e}")))?;
                if msg_len == 0 {
                    return Err(NlError::new(libc::EBADMSG, "netlink: zero-length message"));
                }
                let packet = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&data[..msg_len]);
                off += (msg_len + 3) & !3;
                let packet = match packet {
                    Ok(p) => p,
                    Err(e) => {
                        failure.get_or_insert(NlError::new(
                            libc::EBADMSG,
                            format!("netlink: cannot parse reply: {e}"),
                        ));
                        continue;
                    }
                };
                if packet.header.sequence_number != seq {
                    continue;
                }
                if packet.header.flags & NLM_F_DUMP_INTR != 0 {
                    interrupted = true;
                }
                match packet.payload {
                    NetlinkPayload::InnerMessage(m) => out.push(m),
                    NetlinkPayload::Done(d) => {
                        if d.code < 0 {
                            failure.get_or_insert(NlError::new(
                                -d.code,
                                io::Error::from_raw_os_error(-d.code).to_string(),
                            ));
                        }
                        return finish(out, failure, interrupted);
                    }
                    NetlinkPayload::Error(e) => {
                        if let Some(code) = e.code {
                            let errno = code.get().saturating_abs();
                            let text = ext_ack_text(packet.header.flags, &e.header)
                                .unwrap_or_else(|| io::Error::from_raw_os_error(errno).to_string());
                            failure.get_or_insert(NlError::new(errno, text));
                        }
                        // An ack or error ends a non-dump exchange; a dump
                        // that fails to start ends here too.
                        return finish(out, failure, interrupted);
                    }
                    NetlinkPayload::Overrun(_) => {
                        failure.get_or_insert(NlError::new(libc::EOVERFLOW, "netlink: overrun"));
                    }
                    _ => {}
                }
            }
        }
    }

    /// Receive one datagram into `self.buf` with one system call. The
    /// kernel sizes the datagrams of a dump to what the reader's buffer has
    /// held (32 KiB at most), and a single object's reply is far smaller
    /// than the buffer; should one ever be larger, `MSG_TRUNC` says so and
    /// it counts as a lost reply (`ENOBUFS`: a dump is retried, with the
    /// buffer grown to fit), never as a silently cut one.
    fn recv_datagram(&mut self) -> io::Result<usize> {
        let len = self.sock.recv(&mut &mut self.buf[..], libc::MSG_TRUNC)?;
        if len > self.buf.len() {
            self.buf.resize(len.next_power_of_two(), 0);
            return Err(io::Error::from_raw_os_error(libc::ENOBUFS));
        }
        Ok(len)
    }
}

fn finish(
    out: Vec<RouteNetlinkMessage>,
    failure: Option<NlError>,
    interrupted: bool,
) -> Result<Vec<RouteNetlinkMessage>, NlError> {
    match failure {
        Some(e) => Err(e),
        None if interrupted => Err(NlError::new(libc::EINTR, "netlink dump interrupted")),
        None => Ok(out),
    }
}

/// The `NLMSGERR_ATTR_MSG` text of an error message. `payload` is what
/// follows the error code: the request's header (only the header when the
/// kernel capped it), then the extended-ack attributes.
pub(crate) fn ext_ack_text(flags: u16, payload: &[u8]) -> Option<String> {
    if flags & NLM_F_ACK_TLVS == 0 {
        return None;
    }
    let orig_len = if flags & NLM_F_CAPPED != 0 {
        16
    } else {
        u32::from_ne_bytes(payload.get(..4)?.try_into().ok()?) as usize
    };
    let mut rest = payload.get((orig_len + 3) & !3..)?;
    while rest.len() >= 4 {
        let len = u16::from_ne_bytes([rest[0], rest[1]]) as usize;
        let kind = u16::from_ne_bytes([rest[2], rest[3]]) & 0x3fff;
        if len < 4 || len > rest.len() {
            return None;
        }
        if kind == NLMSGERR_ATTR_MSG {
            let text = &rest[4..len];
            let text = text.split(|b| *b == 0).next().unwrap_or(text);
            return Some(String::from_utf8_lossy(text).into_owned());
        }
        rest = rest.get((len + 3) & !3..).unwrap_or(&[]);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut v = ((4 + value.len()) as u16).to_ne_bytes().to_vec();
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(value);
        while !v.len().is_multiple_of(4) {
            v.push(0);
        }
        v
    }

    #[test]
    fn ext_ack_text_after_capped_and_full_requests() {
        // Capped: the echoed request is its 16-byte header only.
        let mut capped = vec![0u8; 16];
        capped.extend(attr(2, &7u32.to_ne_bytes())); // NLMSGERR_ATTR_OFFS
        capped.extend(attr(NLMSGERR_ATTR_MSG, b"MTU too small\0"));
        let flags = NLM_F_ACK_TLVS | NLM_F_CAPPED;
        assert_eq!(
            ext_ack_text(flags, &capped).as_deref(),
            Some("MTU too small")
        );
        // Not capped: skip the whole echoed request, as long as it says.
        let mut full = 22u32.to_ne_bytes().to_vec();
        full.resize(24, 0);
        full.extend(attr(NLMSGERR_ATTR_MSG, b"bad\0"));
        assert_eq!(ext_ack_text(NLM_F_ACK_TLVS, &full).as_deref(), Some("bad"));
        // No TLVs flagged, or garbage: no text.
        assert_eq!(ext_ack_text(0, &capped), None);
        assert_eq!(ext_ack_text(flags, &capped[..10]), None);
        let mut broken = vec![0u8; 16];
        broken.extend([200, 0, 1, 0]);
        assert_eq!(ext_ack_text(flags, &broken), None);
    }
}
