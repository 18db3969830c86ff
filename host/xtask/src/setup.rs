//! `cargo xtask setup`: installs the Debian packages guest builds need, and
//! for `test`/`demo` the tools the tests drive (iproute2, the reference
//! plugins to compare against).

use std::process::{Command, Stdio};

use crate::toolchain::{RUST_PACKAGES, WASI_LIBC_PACKAGE};
use crate::{fail, Context, Result};

/// What the host build needs besides the toolchain: etcd-client compiles
/// the etcd API's protos with protoc; the thin client links musl.
pub const BUILD_PACKAGES: &[&str] = &["protobuf-compiler", "musl-dev"];

/// What the demo runs besides the build: namespaces and ping.
pub const DEMO_PACKAGES: &[&str] = &["iproute2", "iputils-ping"];

/// What the integration tests run besides the build.
/// nftables and iptables: the tests read the node's rulesets with them, and
/// the reference plugins' iptables rules need the latter. podman, runc and
/// busybox-static: the podman test runs a real runtime on a wasm-cni
/// network (busybox is also the CRI tests' pause image); curl probes it.
pub const TEST_PACKAGES: &[&str] = &[
    "iproute2",
    "iputils-ping",
    "containernetworking-plugins",
    "nftables",
    "iptables",
    "podman",
    "runc",
    "busybox-static",
    "curl",
    // The cluster store tests run a real etcd (and etcdctl to inspect it).
    "etcd-server",
    "etcd-client",
    // The registry tests push to and pull from a real registry (htpasswd
    // makes its Basic credentials), and a lying one written in Python.
    "docker-registry",
    "apache2-utils",
    "python3",
    // The node image (`cargo xtask image`), which the Kubernetes tests run;
    // they read the manifests with PyYAML and validate them with PyPI's
    // kubernetes-validate in a virtualenv.
    "buildah",
    "python3-yaml",
    "python3-venv",
    // The kubelet's runtime: containerd 1.6's CRI runs pods on the node the
    // DaemonSet installs (and `ctr` loads the offline pause image).
    "containerd",
    // The JavaScript plugins' toolchain (componentize-js, from npm) runs
    // on Node.js; the Python one comes as a wheel into a venv.
    "nodejs",
    // A real Prometheus scrapes the daemon and answers the Grafana
    // dashboard's queries (host/deploy/dashboards).
    "prometheus",
];

pub fn run(extra: &[&str]) -> Result<()> {
    let wanted: Vec<&str> = RUST_PACKAGES
        .iter()
        .copied()
        .chain([WASI_LIBC_PACKAGE])
        .chain(BUILD_PACKAGES.iter().copied())
        .chain(extra.iter().copied())
        .collect();
    let mut missing = Vec::new();
    for package in &wanted {
        if !installed(package)? {
            missing.push(*package);
        }
    }
    if missing.is_empty() {
        println!(
            "setup: nothing to do, already installed: {}",
            wanted.join(" ")
        );
        return Ok(());
    }

    let sudo = !is_root()?;
    println!(
        "setup: installing {}{}",
        missing.join(" "),
        if sudo { " (with sudo)" } else { "" }
    );
    apt_get(sudo, &["update"])?;
    let mut install = vec!["install", "-y"];
    install.extend(&missing);
    apt_get(sudo, &install)?;
    println!("setup: installed {}", missing.join(" "));
    Ok(())
}

/// Whether dpkg lists `package` as installed.
fn installed(package: &str) -> Result<bool> {
    let output = Command::new("dpkg-query")
        .args(["--show", "--showformat=${Status}", package])
        .stderr(Stdio::null())
        .output()
        .context("running dpkg-query (setup supports Debian and derivatives only)")?;
    Ok(output.status.success() && output.stdout == b"install ok installed")
}

fn is_root() -> Result<bool> {
    let output = Command::new("id")
        .arg("-u")
        .output()
        .context("running id -u")?;
    Ok(output.stdout.trim_ascii() == b"0")
}

fn apt_get(sudo: bool, args: &[&str]) -> Result<()> {
    let mut cmd = if sudo {
        let mut cmd = Command::new("sudo");
        cmd.arg("apt-get");
        cmd
    } else {
        Command::new("apt-get")
    };
    let status = cmd
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .context(format_args!("running apt-get {}", args.join(" ")))?;
    if status.success() {
        Ok(())
    } else {
        Err(fail!("apt-get {} failed ({status})", args.join(" ")))
    }
}
