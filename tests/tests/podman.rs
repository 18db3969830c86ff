//! podman (Debian's, CNI backend) running containers on a network whose
//! conflist is wasm-cni alone — bridge with ipMasq and hairpin, portmap,
//! firewall, tuning as components, and no native plugin directory. podman
//! runs inside a node namespace of the test's own (entered with `nsenter
//! --net`, which keeps the cgroup mounts runc needs), with its storage,
//! configuration and state in a temporary directory.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wasm_cni_tests::{is_root, plugin, wasm_cni_bin, Netns, TempDir};

struct Podman {
    dir: TempDir,
    node: Netns,
}

impl Podman {
    fn new() -> Podman {
        let dir = TempDir::new("podman");
        let d = |p: &str| dir.join(p).to_string_lossy().into_owned();
        for sub in [
            "bin",
            "conf",
            "root",
            "runroot",
            "tmp",
            "rootfs/bin",
            "rootfs/www",
            "plugins",
            "state",
            "cache",
            "ipam",
        ] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        // The only plugin binary podman can find is wasm-cni.
        std::fs::copy(wasm_cni_bin(), dir.join("bin/wasm-cni")).unwrap();
        std::fs::copy("/usr/bin/busybox", dir.join("rootfs/bin/busybox"))
            .expect("busybox-static: cargo xtask setup installs it");
        std::fs::write(dir.join("rootfs/www/index.html"), "hello from the pod\n").unwrap();
        for p in ["bridge", "host-local", "portmap", "firewall", "tuning"] {
            std::fs::copy(plugin(p), dir.join(format!("plugins/{p}.wasm"))).unwrap();
        }
        std::fs::write(
            dir.join("containers.conf"),
            format!(
                r#"[containers]
# The sandbox's own limits: podman's defaults are above its hard limits.
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]

[network]
network_backend = "cni"
cni_plugin_dirs = ["{bin}"]
network_config_dir = "{conf}"

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "{events}"
runtime = "runc"
tmp_dir = "{tmp}"
"#,
                bin = d("bin"),
                conf = d("conf"),
                events = d("events.log"),
                tmp = d("tmp"),
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join("storage.conf"),
            format!(
                "[storage]\ndriver = \"vfs\"\ngraphroot = \"{}\"\nrunroot = \"{}\"\n",
                d("root"),
                d("runroot")
            ),
        )
        .unwrap();
        let conflist = json!({
            "cniVersion": "1.0.0",
            "name": "wasmnet",
            "plugins": [{
                "type": "wasm-cni",
                "pluginDir": d("plugins"),
                "stateDir": d("state"),
                "cacheDir": d("cache"),
                "capabilities": {"portMappings": true},
                "chain": [
                    {"type":"bridge","bridge":"cnipm","isGateway":true,"ipMasq":true,"hairpinMode":true,
                     "ipam":{"type":"host-local","dataDir":d("ipam"),"routes":[{"dst":"0.0.0.0/0"}],
                             "ranges":[[{"subnet":"10.89.7.0/24","gateway":"10.89.7.1"}]]}},
                    {"type":"portmap","capabilities":{"portMappings":true}},
                    {"type":"firewall"},
                    {"type":"tuning"}
                ]
            }]
        });
        std::fs::write(dir.join("conf/wasmnet.conflist"), conflist.to_string()).unwrap();
        Podman {
            dir,
            node: Netns::new("pmn"),
        }
    }

    /// `podman ARGS` in the node namespace; (success, stdout + stderr).
    fn run(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new("nsenter")
            .arg(format!("--net={}", self.node.path()))
            .arg("podman")
            .args(args)
            .env("CONTAINERS_CONF", self.dir.join("containers.conf"))
            .env("CONTAINERS_STORAGE_CONF", self.dir.join("storage.conf"))
            .output()
            .expect("run podman: cargo xtask setup installs it");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    }

    fn rootfs(&self) -> String {
        self.dir.join("rootfs").to_string_lossy().into_owned()
    }

    /// An HTTP GET from a second container on the network, with busybox nc.
    fn get_from_container(&self, addr: &str, port: u16) -> String {
        let script =
            format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | /bin/busybox nc -w 3 {addr} {port}");
        let (_, out) = self.run(&[
            "run",
            "--rm",
            "--network",
            "wasmnet",
            "--rootfs",
            &self.rootfs(),
            "/bin/busybox",
            "sh",
            "-c",
            &script,
        ]);
        out
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let _ = self.run(&["rm", "-a", "-f", "-t", "0"]);
    }
}

fn curl(node: &Netns, url: &str) -> String {
    let started = Instant::now();
    loop {
        let out = Command::new("ip")
            .args(["netns", "exec", &node.name, "curl", "-s", "-m", "3", url])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() || started.elapsed() > Duration::from_secs(5) {
            return text;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn podman_runs_its_default_network_sandboxed() {
    if !is_root("podman_runs_its_default_network_sandboxed") {
        return;
    }
    assert!(
        Path::new("/usr/bin/podman").is_file(),
        "podman missing: cargo xtask setup installs it"
    );
    let pm = Podman::new();
    let (ok, out) = pm.run(&[
        "run",
        "-d",
        "--name",
        "web",
        "--network",
        "wasmnet",
        "-p",
        "8080:80",
        "--rootfs",
        &pm.rootfs(),
        "/bin/busybox",
        "httpd",
        "-f",
        "-p",
        "80",
        "-h",
        "/www",
    ]);
    assert!(ok, "podman run: {out}");
    let (ok, ip) = pm.run(&[
        "inspect",
        "web",
        "--format",
        "{{.NetworkSettings.Networks.wasmnet.IPAddress}}",
    ]);
    assert!(ok, "{ip}");
    let ip = ip.trim().to_string();
    assert!(ip.starts_with("10.89.7."), "{ip}");

    // From the node, through the host port.
    assert_eq!(
        curl(&pm.node, "http://127.0.0.1:8080/"),
        "hello from the pod\n"
    );
    assert_eq!(
        curl(&pm.node, "http://10.89.7.1:8080/"),
        "hello from the pod\n"
    );
    // From another container: directly, and through the gateway's port.
    for (addr, port) in [(ip.as_str(), 80), ("10.89.7.1", 8080)] {
        let got = pm.get_from_container(addr, port);
        assert!(got.contains("hello from the pod"), "{addr}:{port}: {got}");
    }
    let rules = pm.node.exec(&["nft", "list", "table", "inet", "wasm_cni"]);
    assert!(rules.contains(&format!("dnat ip to {ip}:80")), "{rules}");

    let (ok, out) = pm.run(&["rm", "-f", "-t", "0", "web"]);
    assert!(ok, "podman rm: {out}");
    // No allocation, no rule, no record, no link.
    let ls = Command::new(wasm_cni_bin())
        .args(["ipam", "ls", "--json", "--data-dir"])
        .arg(pm.dir.join("ipam"))
        .output()
        .unwrap();
    let views: Value = serde_json::from_slice(&ls.stdout).unwrap();
    let entries: Vec<&Value> = views
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|v| v["entries"].as_array().into_iter().flatten())
        .collect();
    // Released (in reuseIPWait quarantine), none still held.
    assert!(!entries.is_empty(), "{views:#}");
    assert!(
        entries.iter().all(|e| e["state"] == "quarantined"),
        "allocations left: {views:#}"
    );
    let ruleset = pm.node.exec(&["nft", "list", "ruleset"]);
    assert!(!ruleset.contains("comment \"wasm-cni"), "{ruleset}");
    let records = std::fs::read_dir(pm.dir.join("state/networks/wasmnet"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(records, 0, "attachment records left");
    let links = pm.node.exec(&["ip", "-o", "link", "show"]);
    assert!(!links.contains("veth"), "{links}");
    assert_eq!(curl(&pm.node, "http://127.0.0.1:8080/"), "");
}
