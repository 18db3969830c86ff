//! The floor: what a bridge + host-local ADD and DEL must do in the kernel,
//! issued directly over rtnetlink by a minimal native program, with none of
//! a plugin host's machinery (no sandbox, no chain, no records, no lookups
//! to verify what was done).
//!
//! Run like a CNI plugin (CNI_* environment, the bridge config on stdin),
//! inside the node namespace. ADD: bridge (create if absent, `accept_ra=0`,
//! up, gateway address), `ip_forward=1`, an address leased host-local style
//! (one file per address under `ipam.dataDir`, flock, `last_reserved_ip`), a
//! veth created in the container with its peer in the node, container end
//! `arp_notify=1`/`accept_dad=0`, up, address, default route; node end
//! `accept_ra=0`, enslaved and up. DEL: delete the container end (its peer
//! goes with it) and release the lease. IPv4 only, like the bench config.
#![allow(clippy::disallowed_types)] // raw netlink is the point of the floor

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL,
    NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

type Res<T> = Result<T, String>;

fn main() -> ExitCode {
    match run() {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!(
                "{}",
                serde_json::json!({"cniVersion": "1.0.0", "code": 999, "msg": e})
            );
            ExitCode::FAILURE
        }
    }
}

struct Conf {
    bridge: String,
    subnet: Ipv4Addr,
    prefix: u8,
    gateway: Ipv4Addr,
    data_dir: PathBuf,
}

fn env(key: &str) -> String {
    std::env::var(key).unwrap_or_default()
}

fn run() -> Res<String> {
    let mut input = Vec::new();
    io::stdin()
        .read_to_end(&mut input)
        .map_err(|e| format!("stdin: {e}"))?;
    let v: serde_json::Value =
        serde_json::from_slice(&input).map_err(|e| format!("config: {e}"))?;
    let subnet = v["ipam"]["ranges"][0][0]["subnet"]
        .as_str()
        .ok_or("ipam.ranges[0][0].subnet missing")?;
    let (addr, prefix) = subnet.split_once('/').ok_or("subnet without prefix")?;
    let subnet: Ipv4Addr = addr.parse().map_err(|e| format!("subnet: {e}"))?;
    let prefix: u8 = prefix.parse().map_err(|e| format!("prefix: {e}"))?;
    let name = v["name"].as_str().unwrap_or("floor");
    let conf = Conf {
        bridge: v["bridge"].as_str().unwrap_or("cni0").to_string(),
        subnet,
        prefix,
        gateway: Ipv4Addr::from(u32::from(subnet) + 1),
        data_dir: Path::new(
            v["ipam"]["dataDir"]
                .as_str()
                .unwrap_or("/var/lib/cni/networks"),
        )
        .join(name),
    };
    let (cid, ifname, netns) = (env("CNI_CONTAINERID"), env("CNI_IFNAME"), env("CNI_NETNS"));
    match env("CNI_COMMAND").as_str() {
        "ADD" => add(&conf, &cid, &ifname, &netns),
        "DEL" => del(&conf, &cid, &ifname, &netns).map(|()| String::new()),
        "VERSION" => Ok(r#"{"cniVersion":"1.0.0","supportedVersions":["1.0.0"]}"#.into()),
        other => Err(format!("unsupported command {other:?}")),
    }
}

fn add(conf: &Conf, cid: &str, ifname: &str, netns: &str) -> Res<String> {
    let node = File::open("/proc/self/ns/net").map_err(|e| format!("node netns: {e}"))?;
    let ctr = File::open(netns).map_err(|e| format!("{netns}: {e}"))?;
    let mut nl = Nl::new()?;

    // The bridge, up, with the gateway address; forwarding on.
    let mut br = LinkMessage::default();
    br.attributes
        .push(LinkAttribute::IfName(conf.bridge.clone()));
    br.attributes
        .push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(
            InfoKind::Bridge,
        )]));
    nl.change(RouteNetlinkMessage::NewLink(br), NLM_F_CREATE | NLM_F_EXCL)
        .or_else(exists_ok)?;
    let br_index = ifindex(&conf.bridge)?;
    let _ = sysctl(&format!("ipv6/conf/{}/accept_ra", conf.bridge), "0");
    nl.change(RouteNetlinkMessage::SetLink(up(br_index)), 0)?;
    let ip = lease(conf, cid, ifname)?;
    nl.change(
        RouteNetlinkMessage::NewAddress(address(br_index, conf.gateway, conf.prefix)),
        NLM_F_CREATE | NLM_F_EXCL,
    )
    .or_else(exists_ok)?;
    sysctl("ipv4/ip_forward", "1")?;

    // The veth, made in the container with its peer in the node.
    let host_veth = veth_name(cid, ifname);
    setns(&ctr)?;
    let mut cnl = Nl::new()?;
    let mut peer = LinkMessage::default();
    peer.attributes
        .push(LinkAttribute::IfName(host_veth.clone()));
    peer.attributes
        .push(LinkAttribute::NetNsFd(node.as_raw_fd()));
    let mut veth = LinkMessage::default();
    veth.attributes
        .push(LinkAttribute::IfName(ifname.to_string()));
    veth.attributes.push(LinkAttribute::LinkInfo(vec![
        LinkInfo::Kind(InfoKind::Veth),
        LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer))),
    ]));
    cnl.change(
        RouteNetlinkMessage::NewLink(veth),
        NLM_F_CREATE | NLM_F_EXCL,
    )?;
    sysctl(&format!("ipv4/conf/{ifname}/arp_notify"), "1")?;
    let _ = sysctl(&format!("ipv6/conf/{ifname}/accept_dad"), "0");
    let index = ifindex(ifname)?;
    cnl.change(RouteNetlinkMessage::SetLink(up(index)), 0)?;
    cnl.change(
        RouteNetlinkMessage::NewAddress(address(index, ip, conf.prefix)),
        NLM_F_CREATE | NLM_F_EXCL,
    )?;
    let mut route = RouteMessage::default();
    route.header.address_family = AddressFamily::Inet;
    route.header.table = 254;
    route.header.protocol = RouteProtocol::Boot;
    route.header.scope = RouteScope::Universe;
    route.header.kind = RouteType::Unicast;
    route
        .attributes
        .push(RouteAttribute::Gateway(RouteAddress::from(IpAddr::V4(
            conf.gateway,
        ))));
    route.attributes.push(RouteAttribute::Oif(index));
    cnl.change(
        RouteNetlinkMessage::NewRoute(route),
        NLM_F_CREATE | NLM_F_EXCL,
    )?;

    // The node end: into the bridge, up.
    setns(&node)?;
    let host_index = ifindex(&host_veth)?;
    let _ = sysctl(&format!("ipv6/conf/{host_veth}/accept_ra"), "0");
    let mut port = up(host_index);
    port.attributes.push(LinkAttribute::Controller(br_index));
    nl.change(RouteNetlinkMessage::SetLink(port), 0)?;

    Ok(serde_json::json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": conf.bridge}, {"name": host_veth}, {"name": ifname, "sandbox": netns}],
        "ips": [{"interface": 2, "address": format!("{ip}/{}", conf.prefix), "gateway": conf.gateway.to_string()}],
        "routes": [{"dst": "0.0.0.0/0"}],
    })
    .to_string())
}

fn del(conf: &Conf, cid: &str, ifname: &str, netns: &str) -> Res<()> {
    if let Ok(ctr) = File::open(netns) {
        setns(&ctr)?;
        let mut nl = Nl::new()?;
        let mut link = LinkMessage::default();
        link.attributes
            .push(LinkAttribute::IfName(ifname.to_string()));
        match nl.change(RouteNetlinkMessage::DelLink(link), 0) {
            Err(e) if !e.contains("No such device") => return Err(e),
            _ => {}
        }
    }
    release(conf, cid, ifname)
}

fn up(index: u32) -> LinkMessage {
    let mut m = LinkMessage::default();
    m.header.index = index;
    m.header.flags.set(LinkFlags::Up, true);
    m.header.change_mask |= LinkFlags::Up;
    m
}

fn address(index: u32, ip: Ipv4Addr, prefix: u8) -> AddressMessage {
    let mut m = AddressMessage::default();
    m.header.index = index;
    m.header.prefix_len = prefix;
    m.header.family = AddressFamily::Inet;
    m.attributes.push(AddressAttribute::Local(IpAddr::V4(ip)));
    m.attributes.push(AddressAttribute::Address(IpAddr::V4(ip)));
    let host_bits = u32::MAX.checked_shr(u32::from(prefix)).unwrap_or(0);
    m.attributes
        .push(AddressAttribute::Broadcast(Ipv4Addr::from(
            u32::from(ip) | host_bits,
        )));
    m
}

fn exists_ok(e: String) -> Res<()> {
    if e.contains("File exists") {
        Ok(())
    } else {
        Err(e)
    }
}

/// A stable veth name for the attachment, like the reference's random one.
fn veth_name(cid: &str, ifname: &str) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in cid.bytes().chain(ifname.bytes()) {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    format!("veth{h:08x}")
}

fn ifindex(name: &str) -> Res<u32> {
    let c = CString::new(name).map_err(|e| e.to_string())?;
    // SAFETY: `c` is a valid NUL-terminated string for the whole call.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(format!("link {name}: {}", io::Error::last_os_error())),
        i => Ok(i),
    }
}

fn setns(ns: &File) -> Res<()> {
    // SAFETY: setns on a namespace fd we hold; the process is single-threaded.
    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(format!("setns: {}", io::Error::last_os_error()));
    }
    Ok(())
}

/// Writes `/proc/sys/net/<key>` in the calling thread's namespace.
fn sysctl(key: &str, value: &str) -> Res<()> {
    fs::write(format!("/proc/sys/net/{key}"), value).map_err(|e| format!("sysctl {key}: {e}"))
}

/// host-local's store, reduced: flock the network's directory lock, take
/// the first free address after `last_reserved_ip.0` (a file per address,
/// created O_EXCL, holding the owner), record it as the last reserved.
fn lease(conf: &Conf, cid: &str, ifname: &str) -> Res<Ipv4Addr> {
    let _lock = lock(&conf.data_dir)?;
    let last_path = conf.data_dir.join("last_reserved_ip.0");
    let first = u32::from(conf.subnet) + 2;
    let size = 1u32 << (32 - u32::from(conf.prefix));
    let last_host = u32::from(conf.subnet) + size - 2;
    let start = fs::read_to_string(&last_path)
        .ok()
        .and_then(|s| s.trim().parse::<Ipv4Addr>().ok())
        .map(|ip| u32::from(ip) + 1)
        .filter(|ip| (first..=last_host).contains(ip))
        .unwrap_or(first);
    let span = last_host - first + 1;
    for step in 0..span {
        let ip = Ipv4Addr::from(first + (start - first + step) % span);
        let created = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(conf.data_dir.join(ip.to_string()));
        match created {
            Ok(mut f) => {
                f.write_all(format!("{cid}\r\n{ifname}").as_bytes())
                    .map_err(|e| format!("lease: {e}"))?;
                fs::write(&last_path, ip.to_string()).map_err(|e| format!("lease: {e}"))?;
                return Ok(ip);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("lease: {e}")),
        }
    }
    Err("no free address".into())
}

fn release(conf: &Conf, cid: &str, ifname: &str) -> Res<()> {
    let _lock = lock(&conf.data_dir)?;
    let owner = format!("{cid}\r\n{ifname}");
    let entries = match fs::read_dir(&conf.data_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("release: {e}")),
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.parse::<Ipv4Addr>().is_ok())
            && fs::read_to_string(&path).is_ok_and(|s| s.trim() == owner)
        {
            fs::remove_file(&path).map_err(|e| format!("release: {e}"))?;
        }
    }
    Ok(())
}

fn lock(dir: &Path) -> Res<File> {
    fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join("lock"))
        .map_err(|e| format!("lock: {e}"))?;
    // SAFETY: flock on an fd we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(format!("flock: {}", io::Error::last_os_error()));
    }
    Ok(f)
}

/// One rtnetlink socket in the namespace of the thread that opened it;
/// every change is acknowledged before the next is sent.
struct Nl {
    sock: Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl Nl {
    fn new() -> Res<Self> {
        let mut sock = Socket::new(NETLINK_ROUTE).map_err(|e| format!("netlink: {e}"))?;
        sock.bind_auto().map_err(|e| format!("netlink: {e}"))?;
        sock.connect(&SocketAddr::new(0, 0))
            .map_err(|e| format!("netlink: {e}"))?;
        Ok(Nl {
            sock,
            seq: 0,
            buf: vec![0; 8192],
        })
    }

    fn change(&mut self, msg: RouteNetlinkMessage, flags: u16) -> Res<()> {
        self.seq += 1;
        let what = match &msg {
            RouteNetlinkMessage::NewLink(_) => "RTM_NEWLINK",
            RouteNetlinkMessage::SetLink(_) => "RTM_SETLINK",
            RouteNetlinkMessage::DelLink(_) => "RTM_DELLINK",
            RouteNetlinkMessage::NewAddress(_) => "RTM_NEWADDR",
            RouteNetlinkMessage::NewRoute(_) => "RTM_NEWROUTE",
            _ => "netlink request",
        };
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | NLM_F_ACK | flags;
        header.sequence_number = self.seq;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::from(msg));
        packet.finalize();
        let mut out = vec![0u8; packet.buffer_len()];
        packet.serialize(&mut out);
        self.sock
            .send(&out, 0)
            .map_err(|e| format!("netlink send: {e}"))?;
        loop {
            let n = self
                .sock
                .recv(&mut &mut self.buf[..], 0)
                .map_err(|e| format!("netlink recv: {e}"))?;
            let reply = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&self.buf[..n])
                .map_err(|e| format!("netlink parse: {e}"))?;
            if reply.header.sequence_number != self.seq {
                continue;
            }
            if let NetlinkPayload::Error(e) = reply.payload {
                return match e.code {
                    None => Ok(()),
                    Some(code) => Err(format!(
                        "{what}: {}",
                        io::Error::from_raw_os_error(code.get().saturating_abs())
                    )),
                };
            }
        }
    }
}
