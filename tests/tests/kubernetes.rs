//! The Kubernetes manifests (host/deploy/kubernetes) and the node image
//! (`cargo xtask image`), as a cluster would run them.
//!
//! No kubelet or API server can run here: the manifests are validated
//! offline against the Kubernetes schema (PyPI `kubernetes-validate`,
//! strict), and the DaemonSet's containers are run by podman exactly as its
//! pod spec says (args, env, mounts, security context), in a namespace
//! standing in for the node, with the node's directories under a temporary
//! root and the API server played by tests/fixtures/kube-apiserver.py. The
//! container runtime is the kubelet's: containerd 1.6's CRI, driven by a
//! CRI client of our own (host/cri), on that node.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wasm_cni_cri::{pause_image, Containerd, Cri};
use wasm_cni_tests::{
    is_root, python_venv, sh, workspace_root, Installed, KubeApi, Netns, TempDir,
};

fn manifests() -> Vec<PathBuf> {
    let dir = workspace_root().join("host/deploy/kubernetes");
    let mut out: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no manifests in {}", dir.display());
    out
}

/// Every document of the manifests, as JSON (PyYAML).
fn documents() -> Vec<Value> {
    let mut docs = Vec::new();
    for path in manifests() {
        let out = Command::new("python3")
            .args([
                "-c",
                "import json, sys, yaml; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d]))",
            ])
            .arg(&path)
            .output()
            .expect("python3");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        docs.extend(v.as_array().unwrap().iter().cloned());
    }
    docs
}

fn find<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in the manifests"))
}

/// `kubernetes-validate`, from PyPI, in a virtualenv under target/ made
/// on first use (the test installs what it needs).
fn validator() -> PathBuf {
    python_venv("kubernetes-validate", "kubernetes-validate==1.37.0")
        .join("bin/kubernetes-validate")
}

#[test]
fn the_manifests_validate_strictly_and_grant_only_what_install_and_cluster_mode_read() {
    let validate = validator();
    for path in manifests() {
        let out = Command::new(&validate)
            .arg("--strict")
            .arg(&path)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{}: {text}", path.display());
        assert!(!text.contains("WARN") && !text.contains("ERROR"), "{text}");
    }
    // The validator can fail: a misspelt field is refused in strict mode.
    let dir = TempDir::new("k8s-bad");
    let bad = dir.join("bad.yaml");
    let text = fs::read_to_string(&manifests()[0]).unwrap();
    fs::write(&bad, text.replace("hostNetwork: true", "hostNetwrok: true")).unwrap();
    let out = Command::new(&validate)
        .arg("--strict")
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success(), "a misspelt field passed");

    let docs = documents();
    // Reads of Nodes, nothing more: the installer gets its own, the
    // daemon's cluster mode lists and watches them all; neither writes.
    let role = find(&docs, "ClusterRole");
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}])
    );
    let ds = find(&docs, "DaemonSet");
    let spec = &ds["spec"]["template"]["spec"];
    assert_eq!(
        spec["serviceAccountName"],
        find(&docs, "ServiceAccount")["metadata"]["name"]
    );
    assert_eq!(spec["priorityClassName"], "system-node-critical");
    assert_eq!(spec["tolerations"], json!([{"operator": "Exists"}]));
    assert_eq!(ds["spec"]["updateStrategy"]["type"], "RollingUpdate");
    // Guaranteed QoS: requests equal limits, in every container.
    for c in spec["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .chain(spec["containers"].as_array().unwrap())
    {
        assert_eq!(
            c["resources"]["requests"], c["resources"]["limits"],
            "{}",
            c["name"]
        );
    }
    // The probes ask the daemon's own listener: a unix socket in the
    // directory only root enters, never a TCP port a local user could take
    // first, by exec, which checks who answers.
    let daemon = &spec["containers"][0];
    assert!(
        daemon["args"]
            .as_array()
            .unwrap()
            .contains(&json!("--cluster-node=$(NODE_NAME)")),
        "cluster mode is the default: {}",
        daemon["args"]
    );
    let template = find(&docs, "ConfigMap")["data"]["template.json"]
        .as_str()
        .unwrap();
    assert!(
        !template.contains("ipMasq"),
        "the bridge would NAT pod to pod"
    );
    let metrics = "--metrics=unix:/run/wasm-cni/metrics.sock";
    assert!(
        daemon["args"].as_array().unwrap().contains(&json!(metrics)),
        "{}",
        daemon["args"]
    );
    for (probe, what) in [("livenessProbe", "live"), ("readinessProbe", "ready")] {
        assert_eq!(
            daemon[probe]["exec"]["command"],
            json!(["/opt/wasm-cni/wasm-cni", "probe", what, metrics]),
            "{probe}"
        );
        assert!(daemon[probe].get("httpGet").is_none(), "{probe}");
    }
    // privileged says it all; capabilities beside it said nothing.
    assert_eq!(daemon["securityContext"]["privileged"], true);
    assert!(daemon["securityContext"].get("capabilities").is_none());
    // The installer and the daemon (cluster mode) get the token, each
    // mounted once and read-only; nothing else of the pod does.
    assert_eq!(spec["automountServiceAccountToken"], false);
    let token_mounts = |c: &Value| {
        c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| {
                spec["volumes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|v| v["name"] == m["name"] && v.get("projected").is_some())
            })
            .count()
    };
    assert_eq!(token_mounts(&spec["initContainers"][0]), 1);
    assert_eq!(token_mounts(daemon), 1);
    assert_eq!(spec["containers"].as_array().unwrap().len(), 1);
    // The installer runs with no capability at all.
    let init = &spec["initContainers"][0];
    assert_eq!(
        init["securityContext"]["capabilities"]["drop"],
        json!(["ALL"])
    );
    assert!(init["securityContext"]["capabilities"].get("add").is_none());
}

/// A container of the pod spec as `podman run` arguments, its hostPath
/// volumes under `root` (mounted at the same path inside, as the
/// rewritten args and template name them).
fn podman_args(
    c: &Value,
    spec: &Value,
    root: &Path,
    (configmaps, sa): (&Path, &Path),
    env: &[(String, String)],
) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    let sc = &c["securityContext"];
    if sc["privileged"] == true {
        a.push("--privileged".into());
    }
    if let Some(uid) = sc["runAsUser"].as_u64() {
        a.push(format!("--user={uid}"));
    }
    if sc["readOnlyRootFilesystem"] == true {
        a.push("--read-only".into());
    }
    if sc["allowPrivilegeEscalation"] == false {
        a.push("--security-opt=no-new-privileges".into());
    }
    for cap in sc["capabilities"]["drop"].as_array().into_iter().flatten() {
        a.push(format!("--cap-drop={}", cap.as_str().unwrap()));
    }
    for cap in sc["capabilities"]["add"].as_array().into_iter().flatten() {
        a.push(format!("--cap-add={}", cap.as_str().unwrap()));
    }
    if let Some(mem) = c["resources"]["limits"]["memory"].as_str() {
        a.push(format!(
            "--memory={}",
            mem.replace("Mi", "m").replace("Gi", "g")
        ));
    }
    for m in c["volumeMounts"].as_array().unwrap() {
        let vol = spec["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == m["name"])
            .unwrap();
        let ro = if m["readOnly"] == true { ":ro" } else { "" };
        let mount = m["mountPath"].as_str().unwrap();
        if let Some(host) = vol["hostPath"]["path"].as_str() {
            let on_node = under(root, host);
            fs::create_dir_all(&on_node).unwrap();
            a.push(format!(
                "--volume={}:{}{ro}",
                on_node.display(),
                on_node.display()
            ));
        } else if vol.get("projected").is_some() {
            // The service account, as the kubelet projects it.
            a.push(format!("--volume={}:{mount}{ro}", sa.display()));
        } else {
            a.push(format!("--volume={}:{mount}{ro}", configmaps.display()));
        }
    }
    for (k, v) in env {
        a.push(format!("--env={k}={v}"));
    }
    a
}

fn under(root: &Path, node_path: &str) -> PathBuf {
    root.join(node_path.trim_start_matches('/'))
}

/// Replace every hostPath of `spec` in `text` with its place under `root`.
fn rehome(text: &str, spec: &Value, root: &Path) -> String {
    let mut paths: Vec<String> = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["hostPath"]["path"].as_str().map(str::to_string))
        .collect();
    paths.sort_by_key(|p| std::cmp::Reverse(p.len()));
    let mut out = text.to_string();
    for (i, p) in paths.iter().enumerate() {
        out = out.replace(p.as_str(), &format!("\u{1}{i}\u{1}"));
    }
    for (i, p) in paths.iter().enumerate() {
        out = out.replace(&format!("\u{1}{i}\u{1}"), under(root, p).to_str().unwrap());
    }
    out
}

/// podman with storage and settings of this test's own (nothing of the
/// machine's podman is used or changed); its containers and images go
/// with it on drop, also on failure.
struct Podman {
    dir: TempDir,
    containers: Vec<String>,
}

impl Podman {
    fn new() -> Podman {
        let dir = TempDir::new("k8s-podman");
        let d = |p: &str| dir.join(p).display().to_string();
        fs::write(
            dir.join("containers.conf"),
            format!(
                "[containers]\n\
                 # podman's defaults are above the machine's hard limits, and\n\
                 # raising them needs a capability the installer drops.\n\
                 default_ulimits = [\"nofile=1024:1024\", \"nproc=1024:1024\"]\n\
                 [engine]\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\n\
                 events_logfile_path = \"{}\"\nruntime = \"runc\"\ntmp_dir = \"{}\"\n",
                d("events.log"),
                d("tmp")
            ),
        )
        .unwrap();
        fs::write(
            dir.join("storage.conf"),
            format!(
                "[storage]\ndriver = \"vfs\"\ngraphroot = \"{}\"\nrunroot = \"{}\"\n",
                d("root"),
                d("runroot")
            ),
        )
        .unwrap();
        Podman {
            dir,
            containers: Vec::new(),
        }
    }

    fn run(&self, args: &[String]) -> (bool, String) {
        let out = Command::new("podman")
            .args(args)
            .env("CONTAINERS_CONF", self.dir.join("containers.conf"))
            .env("CONTAINERS_STORAGE_CONF", self.dir.join("storage.conf"))
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        for c in self.containers.clone() {
            let _ = self.run(&["rm".into(), "-f".into(), "-t".into(), "0".into(), c]);
        }
        let _ = self.run(&["rmi".into(), "-a".into(), "-f".into()]);
    }
}

/// A node as the DaemonSet sees it: its pod spec and the image in a podman
/// of the test's own, the node's directories under a temporary root, the
/// stand-in API server, and a namespace standing in for the node's network.
struct Node {
    pm: Podman,
    image: String,
    spec: Value,
    root: TempDir,
    ns: Netns,
    api: KubeApi,
    configmaps: PathBuf,
    sa: PathBuf,
}

impl Node {
    fn new(tag: &str) -> Node {
        let archive = std::env::var("WASM_CNI_IMAGE")
            .map(PathBuf::from)
            .unwrap_or_else(|_| workspace_root().join("target/image/wasm-cni.oci.tar"));
        assert!(
            archive.is_file(),
            "{}: no node image (cargo xtask image, or cargo xtask test, builds it)",
            archive.display()
        );
        let pm = Podman::new();
        let (ok, out) = pm.run(&[
            "load".into(),
            "-q".into(),
            "-i".into(),
            archive.display().to_string(),
        ]);
        assert!(ok, "{out}");
        let image = out
            .lines()
            .find_map(|l| l.strip_prefix("Loaded image: "))
            .or_else(|| {
                out.lines()
                    .find_map(|l| l.strip_prefix("Loaded image(s): "))
            })
            .unwrap_or_else(|| panic!("{out}"))
            .trim()
            .to_string();
        // `cargo xtask image` renders the manifest beside the archive with
        // the image named by the digest of what it built: the one loaded.
        let digest = pm
            .run(&[
                "image".into(),
                "inspect".into(),
                "--format".into(),
                "{{.Digest}}".into(),
                image.clone(),
            ])
            .1
            .trim()
            .to_string();
        assert!(digest.starts_with("sha256:"), "{digest}");
        let pinned = fs::read_to_string(archive.with_file_name("wasm-cni.yaml")).unwrap();
        let loaded_tag = image.rsplit_once(':').map_or("", |(_, t)| t);
        assert!(
            pinned.contains(&format!("image: localhost/wasm-cni:{loaded_tag}@{digest}")),
            "{digest} not pinned in\n{pinned}"
        );
        let docs = documents();
        let spec = find(&docs, "DaemonSet")["spec"]["template"]["spec"].clone();
        assert_eq!(spec["hostNetwork"], true);
        let root = TempDir::new(&format!("{tag}-node"));
        let ns = Netns::new(tag);
        // The node's uplink, holding its InternalIP (the stand-in API
        // server's node-a has 192.168.99.1): the pods' MTU comes from it.
        // A bridge of no ports, so the pods' veths stay the only ones.
        for cmd in [
            "ip link add eth0 mtu 1480 type bridge",
            "ip addr add 192.168.99.1/24 dev eth0",
            "ip link set eth0 up",
        ] {
            ns.exec(&cmd.split(' ').collect::<Vec<_>>());
        }
        let api = KubeApi::start(&ns);
        let configmaps = root.join("configmap");
        fs::create_dir_all(&configmaps).unwrap();
        let template = find(&docs, "ConfigMap")["data"]["template.json"]
            .as_str()
            .unwrap()
            .to_string();
        fs::write(
            configmaps.join("template.json"),
            rehome(&template, &spec, root.path()),
        )
        .unwrap();
        // The service account, as the kubelet projects it.
        let sa = root.join("serviceaccount");
        fs::create_dir_all(&sa).unwrap();
        fs::copy(api.dir.join("token"), sa.join("token")).unwrap();
        fs::copy(api.dir.join("ca.pem"), sa.join("ca.crt")).unwrap();
        Node {
            pm,
            image,
            spec,
            root,
            ns,
            api,
            configmaps,
            sa,
        }
    }

    fn dir(&self, node_path: &str) -> PathBuf {
        under(self.root.path(), node_path)
    }

    fn conflist(&self) -> PathBuf {
        self.dir("/etc/cni/net.d").join("00-wasm-cni.conflist")
    }

    /// `podman run` of container `c` of the pod spec from `image`, with
    /// `args` (rehomed) instead of the spec's when given.
    fn podman_run(
        &self,
        c: &Value,
        image: &str,
        detach: Option<&str>,
        args: &[String],
    ) -> (bool, String) {
        let env = vec![
            ("NODE_NAME".to_string(), "node-a".to_string()),
            (
                "KUBERNETES_SERVICE_HOST".to_string(),
                "127.0.0.1".to_string(),
            ),
            ("KUBERNETES_SERVICE_PORT".to_string(), "6443".to_string()),
        ];
        let mut run = vec!["run".to_string()];
        match detach {
            Some(name) => run.extend(["-d".to_string(), format!("--name={name}")]),
            None => run.push("--rm".into()),
        }
        run.push(format!("--network=ns:/run/netns/{}", self.ns.name));
        run.extend(podman_args(
            c,
            &self.spec,
            self.root.path(),
            (&self.configmaps, &self.sa),
            &env,
        ));
        run.push(image.to_string());
        let spec_args: Vec<String> = c["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect();
        for a in if args.is_empty() {
            &spec_args[..]
        } else {
            args
        } {
            run.push(rehome(a, &self.spec, self.root.path()).replace("$(NODE_NAME)", "node-a"));
        }
        self.pm.run(&run)
    }

    /// The init container, from `image`.
    fn install(&self, image: &str) -> String {
        let (ok, out) = self.podman_run(&self.spec["initContainers"][0], image, None, &[]);
        assert!(ok, "install: {out}");
        out
    }

    /// `wasm-cni uninstall` from `image`, as an operator runs it on the
    /// node: the installer's container, which also reads the network's
    /// state dir to see whether attachments remain.
    fn uninstall(&self, image: &str) -> (bool, String) {
        let mut c = self.spec["initContainers"][0].clone();
        c["volumeMounts"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "run", "mountPath": "/run/wasm-cni", "readOnly": true}));
        // It also removes cluster mode's routes and table from the node.
        c["securityContext"]["capabilities"]["add"] = json!(["NET_ADMIN"]);
        let args = ["uninstall", "--record=/var/lib/wasm-cni/install.json"].map(String::from);
        self.podman_run(&c, image, None, &args)
    }

    /// The daemon container, from `image`, named `name`; returns once it
    /// has published the conflist.
    fn start_daemon(&mut self, image: &str, name: &str) {
        self.pm.containers.push(name.to_string());
        let (ok, out) = self.podman_run(&self.spec["containers"][0], image, Some(name), &[]);
        assert!(ok, "daemon: {out}");
    }

    fn wait_conflist(&self, daemon: &str) {
        let started = std::time::Instant::now();
        while !self.conflist().exists() {
            let (_, logs) = self.pm.run(&["logs".into(), daemon.into()]);
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "no conflist: {logs}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn podman(&self, args: &[&str]) -> String {
        let (ok, out) = self
            .pm
            .run(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>());
        assert!(ok, "podman {}: {out}", args.join(" "));
        out
    }

    /// The same image with binaries of another digest: a different build
    /// as far as the installer can tell (bytes after an ELF's end are never
    /// loaded), built with `podman build` from the loaded image.
    fn another_build(&self, tag: &str) -> String {
        let ctx = self.root.join("another-build");
        fs::create_dir_all(&ctx).unwrap();
        let tmp = format!("{tag}-extract");
        self.podman(&["create", "--name", &tmp, &self.image, "version"]);
        for b in ["wasm-cni", "wasm-cni-client"] {
            let to = ctx.join(b);
            self.podman(&[
                "cp",
                &format!("{tmp}:/opt/wasm-cni/{b}"),
                to.to_str().unwrap(),
            ]);
            let mut bytes = fs::read(&to).unwrap();
            bytes.extend_from_slice(b"another build");
            fs::write(&to, bytes).unwrap();
        }
        self.podman(&["rm", &tmp]);
        fs::write(
            ctx.join("Containerfile"),
            format!(
                "FROM {}\nCOPY wasm-cni wasm-cni-client /opt/wasm-cni/\n",
                self.image
            ),
        )
        .unwrap();
        let name = format!("localhost/wasm-cni:{tag}");
        self.podman(&["build", "-q", "-t", &name, ctx.to_str().unwrap()]);
        name
    }
}

fn sha256(p: &Path) -> String {
    let out = sh(&["sha256sum", p.to_str().unwrap()]);
    out.split_whitespace().next().unwrap().to_string()
}

fn ping(cri: &Cri, from: &str, to_ip: &str) -> bool {
    let pid = cri.pod_pid(from).unwrap();
    Command::new("nsenter")
        .args([
            "-t",
            &pid.to_string(),
            "-n",
            "ping",
            "-c",
            "1",
            "-W",
            "2",
            to_ip,
        ])
        .output()
        .unwrap()
        .status
        .success()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The kubelet's path, for real: containerd 1.6's CRI (through a CRI
/// client of our own) on a node whose CNI is installed and served by the
/// DaemonSet's containers, run by podman from the image. The node is not
/// ready until the daemon answers; pods start, reach each other and go
/// without a trace; an upgrade (new build, daemon stopped with SIGTERM,
/// later killed with SIGKILL) fails no CRI call of a loop running through
/// it; and a pod still running at uninstall is stopped and removed through
/// the CRI afterwards.
#[test]
fn containerd_runs_pods_on_the_daemonset_through_an_upgrade_and_uninstall() {
    let test = "containerd_runs_pods_on_the_daemonset_through_an_upgrade_and_uninstall";
    if !is_root(test) {
        return;
    }
    let mut node = Node::new("k8sc");
    let conf_dir = node.dir("/etc/cni/net.d");
    let bin_dir = node.dir("/opt/cni/bin");
    fs::create_dir_all(&conf_dir).unwrap();
    fs::create_dir_all(&bin_dir).unwrap();
    // Someone else's files: byte-identical throughout, and the conf dir
    // never recreated. containerd ignores the extension in the conf dir; it
    // runs `loopback` from the bin dir for every pod, which the node has as
    // every kubeadm node does (kubernetes-cni: the reference plugins).
    fs::write(conf_dir.join("README.disabled"), "not ours\n").unwrap();
    fs::copy("/usr/lib/cni/loopback", bin_dir.join("loopback")).unwrap();
    let loopback = sha256(&bin_dir.join("loopback"));
    let conf_ino = fs::metadata(&conf_dir).unwrap().ino();
    let ctd_dir = TempDir::new("k8sc-containerd");
    let pause = pause_image(ctd_dir.path()).unwrap();
    let ctd = Containerd::start(
        &node.ns.name,
        &ctd_dir.join("c"),
        &bin_dir,
        &conf_dir,
        &pause,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let ctd_pid = ctd.pid();
    let cri = ctd.cri().unwrap();
    let ready = || cri.network_ready().unwrap();
    assert!(!ready().0, "NetworkReady before install: {}", ready().1);

    // The init container installs everything but the conflist: not ready.
    let image = node.image.clone();
    let out = node.install(&image);
    assert!(out.contains("pending"), "{out}");
    assert!(!node.conflist().exists());
    assert!(!ready().0, "NetworkReady before the daemon");
    assert!(node.api.requests().contains("/api/v1/nodes/node-a token"));
    // The daemon publishes it; containerd picks it up without a restart.
    node.start_daemon(&image, "wasm-cni-ds-a");
    node.wait_conflist("wasm-cni-ds-a");
    let started = Instant::now();
    while !ready().0 {
        assert!(started.elapsed() < Duration::from_secs(20), "{}", ready().1);
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(ctd.pid(), ctd_pid);
    // The probes, as the kubelet runs them: the pod spec's exec command in
    // the daemon's container.
    let probe = |probe: &str| -> (bool, String) {
        let command: Vec<String> = node.spec["containers"][0][probe]["exec"]["command"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| rehome(a.as_str().unwrap(), &node.spec, node.root.path()))
            .collect();
        let mut args = vec!["exec".to_string(), "wasm-cni-ds-a".to_string()];
        args.extend(command);
        node.pm.run(&args)
    };
    let (live, said) = probe("livenessProbe");
    assert!(live && said.trim() == "ok", "{said}");
    // Ready once it answers `status` (20 s at most).
    let readyz = |ready: bool| -> String {
        let started = Instant::now();
        loop {
            let (ok, said) = probe("readinessProbe");
            if ok == ready {
                return said;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "not {}: {said}",
                if ready { "ready" } else { "unready" }
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    readyz(true);
    // The same listener, as a scraper on the node reads it.
    let socket = node.dir("/run/wasm-cni").join("metrics.sock");
    let get = |path: &str| {
        node.ns.exec(&[
            "curl",
            "-s",
            "--unix-socket",
            socket.to_str().unwrap(),
            &format!("http://localhost{path}"),
        ])
    };
    // A component that no longer compiles makes the node's network not
    // ready, with the cause; liveness stays.
    let bridge = node.dir("/opt/cni/wasm").join("bridge.wasm");
    let good = fs::read(&bridge).unwrap();
    fs::write(&bridge, b"\0asm not a component").unwrap();
    let cause = readyz(false);
    assert!(cause.contains("bridge"), "{cause}");
    assert!(probe("livenessProbe").0);
    fs::write(&bridge, &good).unwrap();
    readyz(true);
    // Hostile: probes cost the daemon no STATUS each; 200 of them in a
    // row add at most the checker's own (one per 3 s).
    let statuses = || -> u64 {
        get("/metrics")
            .lines()
            .filter(|l| l.starts_with("wasm_cni_requests_total{verb=\"STATUS\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    let before = (statuses(), Instant::now());
    let burst = format!(
        "for i in $(seq 200); do curl -s -o /dev/null --unix-socket {} http://localhost/readyz; done",
        socket.display()
    );
    node.ns.exec(&["sh", "-c", &burst]);
    let checks = before.1.elapsed().as_secs() / 3 + 2;
    assert!(
        statuses() - before.0 <= checks,
        "{} STATUS for 200 probes",
        statuses() - before.0
    );
    let meta = fs::metadata(node.conflist()).unwrap();
    assert_eq!((meta.mode() & 0o777, meta.uid()), (0o600, 0));
    let conf: Value = serde_json::from_slice(&fs::read(node.conflist()).unwrap()).unwrap();
    assert_eq!(
        conf["plugins"][0]["chain"][0]["mtu"], 1430,
        "the pods' MTU: the uplink's 1480 less VXLAN's 50"
    );
    for b in ["wasm-cni", "wasm-cni-engine"] {
        let meta = fs::metadata(bin_dir.join(b)).unwrap();
        assert_eq!((meta.mode() & 0o777, meta.uid()), (0o755, 0), "{b}");
    }

    // Two pods through the CRI: addresses from the node's CIDR, and they
    // reach each other.
    let a = cri
        .run_pod("pod-a")
        .unwrap_or_else(|e| panic!("{e}\n{}", ctd.log()));
    let b = cri.run_pod("pod-b").unwrap();
    let (ip_a, ip_b) = (cri.pod_ip(&a).unwrap(), cri.pod_ip(&b).unwrap());
    assert!(
        ip_a.starts_with("10.244.3.") && ip_b.starts_with("10.244.3."),
        "{ip_a} {ip_b}"
    );
    assert!(ping(&cri, &a, &ip_b), "pod-a cannot reach pod-b at {ip_b}");
    assert!(ping(&cri, &b, &ip_a), "pod-b cannot reach pod-a at {ip_a}");
    for id in [&a, &b] {
        cri.stop_pod(id).unwrap();
        cri.remove_pod(id).unwrap();
    }
    assert!(cri.list_pods().unwrap().is_empty());
    let veths = node.ns.exec(&["ip", "-o", "link", "show", "type", "veth"]);
    assert!(veths.trim().is_empty(), "left behind: {veths}");
    // Cluster mode (the stand-in API server lists node-a alone): the pods
    // leave the cluster masqueraded.
    let nat = node
        .ns
        .exec(&["nft", "list", "table", "inet", "wasm_cni_cluster"]);
    assert!(
        nat.contains("ip saddr 10.244.3.0/24 ip daddr 10.244.3.0/24 return"),
        "{nat}"
    );

    // An upgrade while the kubelet starts and stops pods: the DaemonSet's
    // pod is replaced (SIGTERM), the new init container installs another
    // build, the new daemon starts; later it is killed (SIGKILL) and
    // restarted in place. No CRI call may fail.
    let v2 = node.another_build("upgrade");
    let client_before = sha256(&bin_dir.join("wasm-cni"));
    let stop = AtomicBool::new(false);
    let upgrading = AtomicBool::new(false);
    let rest_cycles = AtomicUsize::new(0);
    let (mut rest, mut during, mut failures) = (Vec::new(), Vec::new(), Vec::new());
    std::thread::scope(|s| {
        let load = s.spawn(|| {
            let (mut rest, mut during, mut failures) = (Vec::new(), Vec::new(), Vec::new());
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                i += 1;
                let phase = upgrading.load(Ordering::SeqCst);
                let t = Instant::now();
                let cycle = cri.run_pod(&format!("load-{i}")).and_then(|id| {
                    let ran = t.elapsed();
                    cri.stop_pod(&id)?;
                    cri.remove_pod(&id)?;
                    Ok((ran, t.elapsed()))
                });
                // A cycle the upgrade began during counts as during it.
                let phase = phase || upgrading.load(Ordering::SeqCst);
                match cycle {
                    Ok(ran) if phase => during.push(ran),
                    Ok(ran) => {
                        rest.push(ran);
                        rest_cycles.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) => failures.push(e),
                }
            }
            (rest, during, failures)
        });
        let wait_cycles = |n: usize| {
            let t = Instant::now();
            let start = rest_cycles.load(Ordering::SeqCst);
            while rest_cycles.load(Ordering::SeqCst) < start + n
                && t.elapsed() < Duration::from_secs(60)
            {
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        wait_cycles(20);
        upgrading.store(true, Ordering::SeqCst);
        node.podman(&["stop", "-t", "30", "wasm-cni-ds-a"]);
        node.podman(&["rm", "wasm-cni-ds-a"]);
        // The new pod's image pull: calls meanwhile wait for a daemon.
        std::thread::sleep(Duration::from_secs(1));
        node.install(&v2);
        node.start_daemon(&v2, "wasm-cni-ds-b");
        std::thread::sleep(Duration::from_secs(3));
        node.podman(&["kill", "--signal", "KILL", "wasm-cni-ds-b"]);
        node.podman(&["start", "wasm-cni-ds-b"]);
        std::thread::sleep(Duration::from_secs(3));
        stop.store(true, Ordering::SeqCst);
        (rest, during, failures) = load.join().unwrap();
    });
    assert!(
        failures.is_empty(),
        "failed CRI calls during the upgrade: {failures:#?}"
    );
    assert_ne!(
        sha256(&bin_dir.join("wasm-cni")),
        client_before,
        "not upgraded"
    );
    let figures = |samples: &[(Duration, Duration)],
                   which: fn(&(Duration, Duration)) -> Duration| {
        let mut v: Vec<Duration> = samples.iter().map(which).collect();
        v.sort();
        format!(
            "p50 {:?} p99 {:?} max {:?}",
            percentile(&v, 0.5),
            percentile(&v, 0.99),
            v.last().copied().unwrap_or_default()
        )
    };
    eprintln!(
        "through the upgrade, 0 failed CRI calls; RunPodSandbox at rest {} ({} pods), \
         during {} ({} pods); Run+Stop+Remove at rest {}, during {}",
        figures(&rest, |s| s.0),
        rest.len(),
        figures(&during, |s| s.0),
        during.len(),
        figures(&rest, |s| s.1),
        figures(&during, |s| s.1),
    );
    assert!(!during.is_empty(), "no pod started during the upgrade");

    // The daemon's restarts: the conflist stayed, the node stayed ready.
    assert!(ready().0);
    // STATUS while the daemon is down says 50 and leaves the conflist.
    node.podman(&["stop", "-t", "30", "wasm-cni-ds-b"]);
    let out = Installed::new(&bin_dir, &node.ns, &node.conflist()).call("STATUS", "", "");
    assert!(out.stdout.contains("\"code\": 50"), "{}", out.stdout);
    assert!(node.conflist().exists());
    node.podman(&["start", "wasm-cni-ds-b"]);

    // Uninstall with a pod still running: refused, nothing removed; the
    // DaemonSet goes; the pod is stopped and removed through the CRI.
    let survivor = cri.run_pod("survivor").unwrap();
    let (ok, out) = node.uninstall(&v2);
    assert!(!ok && out.contains("1 attachment(s)"), "{out}");
    assert!(node.conflist().exists() && bin_dir.join("wasm-cni").exists());
    node.podman(&["stop", "-t", "30", "wasm-cni-ds-b"]);
    cri.stop_pod(&survivor)
        .unwrap_or_else(|e| panic!("{e}\n{}", ctd.log()));
    cri.remove_pod(&survivor).unwrap();
    let (ok, out) = node.uninstall(&v2);
    assert!(ok, "{out}");
    assert!(!node.conflist().exists() && !bin_dir.join("wasm-cni").exists());
    let started = Instant::now();
    while ready().0 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "still ready after uninstall"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(ctd.pid(), ctd_pid);
    assert!(cri.list_pods().unwrap().is_empty());
    let veths = node.ns.exec(&["ip", "-o", "link", "show", "type", "veth"]);
    assert!(veths.trim().is_empty(), "left behind: {veths}");
    let tables = node.ns.exec(&["nft", "list", "tables"]);
    assert!(
        !tables.contains("wasm_cni_cluster"),
        "left behind: {tables}"
    );
    let names: Vec<String> = fs::read_dir(&conf_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["README.disabled"]);
    assert_eq!(
        fs::read_to_string(conf_dir.join("README.disabled")).unwrap(),
        "not ours\n"
    );
    assert_eq!(fs::metadata(&conf_dir).unwrap().ino(), conf_ino);
    assert_eq!(sha256(&bin_dir.join("loopback")), loopback);
    drop(cri);
    drop(ctd);
}
