//! The Kubernetes manifests (host/deploy/kubernetes) and the node image
//! (`cargo xtask image`), as a cluster would run them.
//!
//! No kubelet or API server can run here: the manifests are validated
//! offline against the Kubernetes schema (PyPI `kubernetes-validate`,
//! strict), and the DaemonSet's containers are run by podman exactly as its
//! pod spec says (args, env, mounts, security context), in a namespace
//! standing in for the node, with the node's directories under a temporary
//! root and the API server played by tests/fixtures/kube-apiserver.py. The
//! test itself plays the container runtime: it calls the installed
//! `wasm-cni` with the conflist the daemon published.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use wasm_cni_tests::{is_root, sh, workspace_root, Installed, KubeApi, Netns, TempDir};

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
    let venv = workspace_root().join("target/kubernetes-validate");
    let bin = venv.join("bin/kubernetes-validate");
    if !bin.is_file() {
        sh(&["python3", "-m", "venv", venv.to_str().unwrap()]);
        sh(&[
            venv.join("bin/pip").to_str().unwrap(),
            "install",
            "--quiet",
            "kubernetes-validate==1.37.0",
        ]);
    }
    bin
}

#[test]
fn the_manifests_validate_strictly_and_grant_only_what_install_reads() {
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
    let role = find(&docs, "ClusterRole");
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}])
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
    configmaps: &Path,
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

#[test]
fn the_daemonset_installs_publishes_and_serves_pods_in_podman() {
    if !is_root("the_daemonset_installs_publishes_and_serves_pods_in_podman") {
        return;
    }
    let archive = std::env::var("WASM_CNI_IMAGE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| workspace_root().join("target/image/wasm-cni.oci.tar"));
    assert!(
        archive.is_file(),
        "{}: no node image (cargo xtask image, or cargo xtask test, builds it)",
        archive.display()
    );
    let mut pm = Podman::new();
    let (ok, out) = pm.run(&[
        "load".into(),
        "-q".into(),
        "-i".into(),
        archive.display().to_string(),
    ]);
    assert!(ok, "{out}");
    let tag = out
        .lines()
        .find_map(|l| l.strip_prefix("Loaded image: "))
        .or_else(|| {
            out.lines()
                .find_map(|l| l.strip_prefix("Loaded image(s): "))
        })
        .unwrap_or_else(|| panic!("{out}"))
        .trim()
        .to_string();

    let docs = documents();
    let ds = find(&docs, "DaemonSet");
    let spec = ds["spec"]["template"]["spec"].clone();
    assert_eq!(spec["hostNetwork"], true);
    let root = TempDir::new("k8s-node");
    let node = Netns::new("k8sn");
    let pods = [Netns::new("k8sa"), Netns::new("k8sb")];
    let api = KubeApi::start(&node);
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
    let env = vec![
        ("NODE_NAME".to_string(), "node-a".to_string()),
        (
            "KUBERNETES_SERVICE_HOST".to_string(),
            "127.0.0.1".to_string(),
        ),
        ("KUBERNETES_SERVICE_PORT".to_string(), "6443".to_string()),
    ];
    let netns = format!("--network=ns:/run/netns/{}", node.name);
    let sa_mount = format!(
        "--volume={}:/var/run/secrets/kubernetes.io/serviceaccount:ro",
        sa.display()
    );
    let args_of = |c: &Value| -> Vec<String> {
        c["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                rehome(a.as_str().unwrap(), &spec, root.path()).replace("$(NODE_NAME)", "node-a")
            })
            .collect()
    };

    // The init container: everything but the conflist.
    let init = &spec["initContainers"][0];
    let mut run = vec![
        "run".to_string(),
        "--rm".into(),
        netns.clone(),
        sa_mount.clone(),
    ];
    run.extend(podman_args(init, &spec, root.path(), &configmaps, &env));
    run.push(tag.clone());
    run.extend(args_of(init));
    let (ok, out) = pm.run(&run);
    assert!(ok, "install: {out}");
    assert!(out.contains("pending"), "{out}");
    assert!(
        api.requests().contains("/api/v1/nodes/node-a token"),
        "{}",
        api.requests()
    );
    let conf_dir = under(root.path(), "/etc/cni/net.d");
    let conflist = conf_dir.join("00-wasm-cni.conflist");
    assert!(!conflist.exists(), "the conflist before the daemon");
    let bin_dir = under(root.path(), "/opt/cni/bin");
    for b in ["wasm-cni", "wasm-cni-engine"] {
        assert!(bin_dir.join(b).is_file(), "{b}: {out}");
    }

    // The daemon container: it publishes the conflist once it answers.
    let daemon = &spec["containers"][0];
    let name = format!("wasm-cni-ds-{}", std::process::id());
    pm.containers.push(name.clone());
    let mut run = vec![
        "run".to_string(),
        "-d".into(),
        format!("--name={name}"),
        netns.clone(),
    ];
    run.extend(podman_args(daemon, &spec, root.path(), &configmaps, &env));
    run.push(tag.clone());
    run.extend(args_of(daemon));
    let (ok, out) = pm.run(&run);
    assert!(ok, "daemon: {out}");
    let started = std::time::Instant::now();
    while !conflist.exists() {
        let (_, logs) = pm.run(&["logs".into(), name.clone()]);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "no conflist: {logs}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let written: Value = serde_json::from_slice(&fs::read(&conflist).unwrap()).unwrap();
    let subnet = &written["plugins"][0]["chain"][0]["ipam"]["ranges"][0][0]["subnet"];
    assert_eq!(subnet, "10.244.3.0/24", "the node's CIDR from the API");

    // The runtime's calls: two pods, which reach each other.
    let net = Installed::new(&bin_dir, &node, &conflist);
    let call = |verb: &str, id: &str, pod: &Netns| net.call(verb, id, &pod.path());
    let mut ips = Vec::new();
    for (i, pod) in pods.iter().enumerate() {
        let out = call("ADD", &format!("pod{i}"), pod);
        assert_eq!(out.code, 0, "ADD: {}\n{}", out.stdout, out.stderr);
        let ip = out.json()["ips"][0]["address"]
            .as_str()
            .unwrap()
            .to_string();
        ips.push(ip.split('/').next().unwrap().to_string());
    }
    assert!(
        pods[0].try_exec(&["ping", "-c", "1", "-W", "2", &ips[1]]),
        "pod0 cannot reach pod1 at {}",
        ips[1]
    );
    // The daemon stops (an upgrade, a crash): the conflist stays, STATUS
    // says 50, and DEL works again once it is back.
    let (ok, out) = pm.run(&["stop".into(), "-t".into(), "10".into(), name.clone()]);
    assert!(ok, "{out}");
    assert!(conflist.exists());
    let out = call("STATUS", "", &pods[0]);
    assert!(out.stdout.contains("\"code\": 50"), "{}", out.stdout);
    let (ok, out) = pm.run(&["start".into(), name.clone()]);
    assert!(ok, "{out}");
    for (i, pod) in pods.iter().enumerate() {
        let out = call("DEL", &format!("pod{i}"), pod);
        assert_eq!(out.code, 0, "DEL: {}\n{}", out.stdout, out.stderr);
        assert!(pod.link("eth0").is_none());
    }
    let veths = node.exec(&["ip", "-o", "link", "show", "type", "veth"]);
    assert!(veths.trim().is_empty(), "{veths}");
    drop(pm);
}
