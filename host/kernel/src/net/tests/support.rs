//! Throwaway network namespaces for kernel tests.
//!
//! Every kernel test works only inside namespaces it created itself
//! (`wcni-<pid>-<n>-<tag>`, opened by path), and the guard deletes them even
//! when the test fails. The node's own namespace is only ever read.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::net::{KernelNet, MemoryNet, Net, NsId, NsRef};

pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Return early, saying why, from a test that needs root.
macro_rules! require_root {
    () => {
        if !$crate::net::tests::support::is_root() {
            eprintln!("skipped: needs root to create network namespaces");
            return;
        }
    };
}
pub(crate) use require_root;

/// Whether the kernel can make links of a module's kind (`8021q` for vlan,
/// `ipvlan`): loaded already, or loadable now.
pub fn has_module(module: &str) -> bool {
    std::path::Path::new("/sys/module").join(module).exists()
        || Command::new("modprobe")
            .arg(module)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

/// A network namespace made with `ip netns add`, deleted on drop.
pub struct Netns {
    pub name: String,
    pub path: PathBuf,
}

impl Netns {
    pub fn new(tag: &str) -> Netns {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let tag: String = tag
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(16)
            .collect();
        let name = format!("wcni-{}-{n}-{tag}", std::process::id());
        let out = Command::new("ip")
            .args(["netns", "add", &name])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ip netns add {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = PathBuf::from(format!("/run/netns/{name}"));
        Netns { name, path }
    }

    /// Run a command inside the namespace and return its stdout; the command
    /// must succeed.
    pub fn exec(&self, args: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?} in {}: {}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `ip -j ARGS` inside the namespace, parsed.
    pub fn ip_json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = vec!["ip", "-j"];
        all.extend_from_slice(args);
        serde_json::from_str(&self.exec(&all)).unwrap()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// A `KernelNet` with two fresh namespaces opened. Fields drop in order, so
/// the backend (and its namespace fds) goes before the namespaces.
pub struct KernelEnv {
    pub net: KernelNet,
    pub a: NsId,
    pub b: NsId,
    pub ns_a: Netns,
    pub ns_b: Netns,
}

impl KernelEnv {
    pub fn new(tag: &str) -> KernelEnv {
        let ns_a = Netns::new(tag);
        let ns_b = Netns::new(tag);
        let mut net = KernelNet::new();
        let a = net.open(NsRef::Path(&ns_a.path)).unwrap();
        let b = net.open(NsRef::Path(&ns_b.path)).unwrap();
        KernelEnv {
            net,
            a,
            b,
            ns_a,
            ns_b,
        }
    }
}

/// A `MemoryNet` with two namespaces opened.
pub fn memory_env() -> (MemoryNet, NsId, NsId) {
    let mut net = MemoryNet::new();
    net.add_namespace("/run/netns/mem-a");
    net.add_namespace("/run/netns/mem-b");
    let a = net.open(NsRef::Path("/run/netns/mem-a".as_ref())).unwrap();
    let b = net.open(NsRef::Path("/run/netns/mem-b".as_ref())).unwrap();
    (net, a, b)
}
