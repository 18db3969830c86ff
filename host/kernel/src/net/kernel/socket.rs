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
        // Strict checking lets a dump be filtered by the kernel (addresses
        // and routes of one link rather than of every link in the
        // namespace: hundreds on a full node). Before Linux 4.20 the option
        // is refused and dumps are whole; callers filter what comes back
        // either way, so this changes only how much comes back.
        let _ = sock.set_netlink_get_strict_chk(true);
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

    /// Send a `GET` for one object; the reply is that object. No ack is
    /// asked for: the kernel answers with the object or an error, one
    /// datagram, so a lookup costs one receive rather than two.
    pub fn get(&mut self, msg: RouteNetlinkMessage) -> Result<RouteNetlinkMessage, NlError> {
        self.exchange(msg, 0)?
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
        let end = if flags & NLM_F_DUMP != 0 {
            End::Done
        } else if flags & NLM_F_ACK != 0 {
            End::Ack
        } else {
            End::Reply
        };
        self.receive(seq, end)
    }

    /// Read until the request `seq` is finished: `NLMSG_DONE` for a dump,
    /// the ack (or error) for a change, the object (or error) for a `GET`.
    /// It always reads to the end, even past an error, so that the next
    /// request starts on a quiet socket; replies to earlier requests (from
    /// an aborted exchange) are skipped by sequence before they are parsed.
    fn receive(&mut self, seq: u32, end: End) -> Result<Vec<RouteNetlinkMessage>, NlError> {
        let mut reading = Reading::new(seq, end);
        loop {
            let len = match self.recv_datagram() {
                Ok(len) => len,
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    // The socket overflowed and replies were lost. For a
                    // dump, the caller retries. For a change, the outcome is
                    // unknown; say so rather than guess.
                    let msg = if end == End::Ack {
                        "netlink reply lost (receive buffer overrun): the change may or may not have been applied"
                    } else {
                        "netlink reply lost (receive buffer overrun)"
                    };
                    return Err(NlError::new(libc::ENOBUFS, msg));
                }
                Err(e) => return Err(NlError::io(&e)),
            };
            if reading.take(&self.buf[..len])? {
                return reading.finish();
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

/// What finishes an exchange.
#[derive(Debug, Clone, Copy, PartialEq)]
enum End {
    /// A change: its ack or error.
    Ack,
    /// A `GET` of one object: the object or an error.
    Reply,
    /// A dump: `NLMSG_DONE` or an error.
    Done,
}

/// What has come back so far for request `seq`.
struct Reading {
    seq: u32,
    end: End,
    out: Vec<RouteNetlinkMessage>,
    failure: Option<NlError>,
    interrupted: bool,
}

impl Reading {
    fn new(seq: u32, end: End) -> Self {
        Reading {
            seq,
            end,
            out: Vec::new(),
            failure: None,
            interrupted: false,
        }
    }

    /// Take in one datagram; `true` once the exchange is finished.
    fn take(&mut self, datagram: &[u8]) -> Result<bool, NlError> {
        let mut off = 0;
        while off < datagram.len() {
            let data = &datagram[off..];
            let (msg_len, msg_seq) = NetlinkBuffer::new_checked(data)
                .map(|b| (b.length() as usize, b.sequence_number()))
                .map_err(|e| NlError::new(libc::EBADMSG, format!("netlink: {e}")))?;
            if msg_len == 0 {
                return Err(NlError::new(libc::EBADMSG, "netlink: zero-length message"));
            }
            off += (msg_len + 3) & !3;
            if msg_seq != self.seq {
                continue;
            }
            let packet = match NetlinkMessage::<RouteNetlinkMessage>::deserialize(&data[..msg_len])
            {
                Ok(p) => p,
                Err(e) => {
                    self.failure.get_or_insert(NlError::new(
                        libc::EBADMSG,
                        format!("netlink: cannot parse reply: {e}"),
                    ));
                    // Nothing follows a `GET`'s one answer: waiting for
                    // more would wait for ever.
                    if self.end == End::Reply {
                        return Ok(true);
                    }
                    continue;
                }
            };
            if packet.header.flags & NLM_F_DUMP_INTR != 0 {
                self.interrupted = true;
            }
            match packet.payload {
                NetlinkPayload::InnerMessage(m) => {
                    self.out.push(m);
                    if self.end == End::Reply {
                        return Ok(true);
                    }
                }
                NetlinkPayload::Done(d) => {
                    if d.code < 0 {
                        self.failure.get_or_insert(NlError::new(
                            -d.code,
                            io::Error::from_raw_os_error(-d.code).to_string(),
                        ));
                    }
                    return Ok(true);
                }
                NetlinkPayload::Error(e) => {
                    if let Some(code) = e.code {
                        let errno = code.get().saturating_abs();
                        let text = ext_ack_text(packet.header.flags, &e.header)
                            .unwrap_or_else(|| io::Error::from_raw_os_error(errno).to_string());
                        self.failure.get_or_insert(NlError::new(errno, text));
                    }
                    // An ack or error ends a non-dump exchange; a dump that
                    // fails to start ends here too.
                    return Ok(true);
                }
                NetlinkPayload::Overrun(_) => {
                    self.failure
                        .get_or_insert(NlError::new(libc::EOVERFLOW, "netlink: overrun"));
                }
                _ => {}
            }
        }
        Ok(false)
    }

    fn finish(self) -> Result<Vec<RouteNetlinkMessage>, NlError> {
        match self.failure {
            Some(e) => Err(e),
            None if self.interrupted => Err(NlError::new(libc::EINTR, "netlink dump interrupted")),
            None => Ok(self.out),
        }
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

    /// One netlink message as the kernel frames it.
    fn framed(seq: u32, payload: NetlinkPayload<RouteNetlinkMessage>) -> Vec<u8> {
        let mut header = NetlinkHeader::default();
        header.sequence_number = seq;
        let mut packet = NetlinkMessage::new(header, payload);
        packet.finalize();
        let mut out = vec![0u8; packet.buffer_len()];
        packet.serialize(&mut out);
        out
    }

    fn link(name: &str) -> NetlinkPayload<RouteNetlinkMessage> {
        let mut msg = netlink_packet_route::link::LinkMessage::default();
        msg.attributes
            .push(netlink_packet_route::link::LinkAttribute::IfName(
                name.into(),
            ));
        NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(msg))
    }

    fn nack(errno: i32) -> NetlinkPayload<RouteNetlinkMessage> {
        let mut e = netlink_packet_core::ErrorMessage::default();
        e.code = std::num::NonZeroI32::new(-errno);
        e.header = vec![0; 16];
        NetlinkPayload::Error(e)
    }

    /// A link reply whose name attribute claims more bytes than it has.
    fn garbled(seq: u32) -> Vec<u8> {
        let mut m = framed(seq, link("eth0"));
        // Header 16, ifinfomsg 16, then the attribute's length.
        m[32] = 200;
        m
    }

    #[test]
    fn a_get_ends_at_its_one_answer_and_skips_earlier_ones_unparsed() {
        // A stale answer of an aborted exchange, unparsable, then ours: the
        // stale one neither fails the lookup nor is taken for it.
        let mut datagram = garbled(6);
        datagram.extend(framed(7, link("eth0")));
        let mut r = Reading::new(7, End::Reply);
        assert_eq!(r.take(&datagram), Ok(true));
        let got = r.finish().expect("the object");
        assert!(matches!(&got[..], [RouteNetlinkMessage::NewLink(_)]));

        // Its error ends it with the errno.
        let mut r = Reading::new(8, End::Reply);
        assert_eq!(r.take(&framed(8, nack(libc::ENODEV))), Ok(true));
        assert_eq!(r.finish().map_err(|e| e.errno), Err(libc::ENODEV));
    }

    #[test]
    fn a_gets_unparsable_answer_ends_it_as_an_error_not_a_wait() {
        // Nothing follows a lookup's answer, so waiting on would hang the
        // call; a change's exchange reads on to its ack.
        let mut r = Reading::new(3, End::Reply);
        assert_eq!(r.take(&garbled(3)), Ok(true));
        let e = r.finish().expect_err("garbled");
        assert_eq!(e.errno, libc::EBADMSG);
        assert!(
            e.msg.starts_with("netlink: cannot parse reply"),
            "{}",
            e.msg
        );

        let mut r = Reading::new(3, End::Ack);
        assert_eq!(r.take(&garbled(3)), Ok(false));
        let ack = NetlinkPayload::Error(netlink_packet_core::ErrorMessage::default());
        assert_eq!(r.take(&framed(3, ack)), Ok(true));
        assert_eq!(r.finish().map_err(|e| e.errno), Err(libc::EBADMSG));
    }

    #[test]
    fn a_dump_reads_on_to_its_done() {
        let mut r = Reading::new(4, End::Done);
        let mut datagram = framed(4, link("a"));
        datagram.extend(framed(4, link("b")));
        assert_eq!(r.take(&datagram), Ok(false));
        let done = NetlinkPayload::Done(netlink_packet_core::DoneMessage::default());
        assert_eq!(r.take(&framed(4, done)), Ok(true));
        assert_eq!(r.finish().map(|v| v.len()), Ok(2));
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
