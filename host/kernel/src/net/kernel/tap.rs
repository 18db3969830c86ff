//! Persistent tap devices through `/dev/net/tun`, which rtnetlink cannot
//! create. Called on a thread inside the target namespace: a tun device is
//! created in the namespace of whoever opened `/dev/net/tun`.

use std::fs::OpenOptions;
use std::io;
use std::os::fd::AsRawFd;

/// `struct ifreq` as TUNSETIFF reads it: the name, then `ifr_flags` in
/// the union, padded to the kernel's size.
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

const _: () = assert!(std::mem::size_of::<IfReq>() == std::mem::size_of::<libc::ifreq>());

pub(super) fn create(
    name: &str,
    multi_queue: bool,
    owner: Option<u32>,
    group: Option<u32>,
) -> io::Result<()> {
    let tun = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")?;
    let fd = tun.as_raw_fd();
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: 0,
        _pad: [0; 22],
    };
    // The caller checked the name: at most 15 bytes, so NUL-terminated.
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // TUN_EXCL: fail with EBUSY rather than attach to an existing device.
    let mut flags = libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_TUN_EXCL;
    if multi_queue {
        flags |= libc::IFF_MULTI_QUEUE;
    }
    req.flags = flags as libc::c_short;
    // SAFETY: `fd` is an open /dev/net/tun; `req` is a live, initialised
    // ifreq-sized buffer the kernel reads (and writes the name back to)
    // during the call only.
    check(unsafe { libc::ioctl(fd, libc::TUNSETIFF, &mut req as *mut IfReq) })?;
    if let Some(uid) = owner {
        // SAFETY: TUNSETOWNER takes its argument by value; no memory is
        // shared with the kernel.
        check(unsafe { libc::ioctl(fd, libc::TUNSETOWNER, libc::c_ulong::from(uid)) })?;
    }
    if let Some(gid) = group {
        // SAFETY: as above, TUNSETGROUP takes its argument by value.
        check(unsafe { libc::ioctl(fd, libc::TUNSETGROUP, libc::c_ulong::from(gid)) })?;
    }
    // Persistence last: if anything above failed, closing `tun` removes
    // the half-made device.
    // SAFETY: as above, TUNSETPERSIST takes its argument by value.
    check(unsafe { libc::ioctl(fd, libc::TUNSETPERSIST, 1 as libc::c_ulong) })?;
    Ok(())
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
