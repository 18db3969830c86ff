//! `wasm-cni install` / `uninstall`, as a DaemonSet's init container runs
//! them, against a node laid out in a temporary directory (bin, conf,
//! plugin, cache and state dirs), with the real binaries and components.
//!
//! What an attacker (or an unlucky operator) controls here: the contents of
//! the conf and bin dirs before install (someone else's conflist or binary
//! at one of our names, a link planted there), the template and its values,
//! the components directory; and, between install and uninstall, the files
//! install wrote. What they must not gain: install overwriting, following or
//! removing anything it did not write; a half-written node after bad input;
//! uninstall removing a file changed since, or the binaries DEL still needs.

use std::fs;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use wasm_cni_tests::{
    is_root, output_of_copied, plugin, tls_certs, wasm_cni_bin, Installed, KubeApi, Netns, TempDir,
};

/// The image's content: the engine (and the thin client when it was built
/// beside it), and two components.
struct Image {
    dir: TempDir,
}

impl Image {
    fn new(tag: &str) -> Self {
        let dir = TempDir::new(&format!("install-image-{tag}"));
        let engine = wasm_cni_bin();
        fs::copy(&engine, dir.join("wasm-cni")).unwrap();
        let client = engine.with_file_name("wasm-cni-client");
        if client.is_file() {
            fs::copy(&client, dir.join("wasm-cni-client")).unwrap();
        }
        fs::create_dir(dir.join("components")).unwrap();
        for name in ["bridge", "host-local"] {
            fs::copy(plugin(name), dir.join(format!("components/{name}.wasm"))).unwrap();
        }
        Image { dir }
    }

    fn bin(&self) -> PathBuf {
        self.dir.join("wasm-cni")
    }

    fn has_client(&self) -> bool {
        self.dir.join("wasm-cni-client").is_file()
    }
}

/// A node's directories under a temporary root.
struct Node {
    root: TempDir,
}

impl Node {
    fn new(tag: &str) -> Self {
        let root = TempDir::new(&format!("install-node-{tag}"));
        for d in ["opt/cni/bin", "etc/cni/net.d"] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        // What other software keeps there, which install must not touch.
        fs::write(root.join("opt/cni/bin/bridge"), b"someone else's bridge").unwrap();
        fs::write(
            root.join("etc/cni/net.d/10-other.conflist"),
            br#"{"cniVersion":"1.0.0","name":"other","plugins":[{"type":"bridge"}]}"#,
        )
        .unwrap();
        Node { root }
    }

    fn bin_dir(&self) -> PathBuf {
        self.root.join("opt/cni/bin")
    }
    fn conf_dir(&self) -> PathBuf {
        self.root.join("etc/cni/net.d")
    }
    fn conflist(&self) -> PathBuf {
        self.conf_dir().join("00-wasm-cni.conflist")
    }
    fn plugin_dir(&self) -> PathBuf {
        self.root.join("opt/wasm-cni/plugins")
    }
    fn cache_dir(&self) -> PathBuf {
        self.root.join("var/cache/wasm-cni")
    }
    fn state_dir(&self) -> PathBuf {
        self.root.join("run/wasm-cni")
    }
    fn record(&self) -> PathBuf {
        self.root.join("var/lib/wasm-cni/install.json")
    }

    fn template(&self) -> PathBuf {
        let path = self.root.join("template.json");
        let t = json!({
            "cniVersion": "1.1.0",
            "name": "${NETWORK}",
            "plugins": [{
                "type": "wasm-cni",
                "pluginDir": "${PLUGIN_DIR}",
                "cacheDir": "${CACHE_DIR}",
                "stateDir": "${STATE_DIR}",
                "chain": [{
                    "type": "bridge", "bridge": "wcibr0", "isGateway": true, "mtu": "${MTU}",
                    "ipam": {"type": "host-local", "ranges": [[{"subnet": "${POD_CIDR}"}]],
                             "dataDir": "${STATE_DIR}/ipam"}
                }]
            }]
        });
        fs::write(&path, serde_json::to_vec_pretty(&t).unwrap()).unwrap();
        path
    }

    fn install_args(&self, template: &Path) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "install".into(),
            "--template".into(),
            template.display().to_string(),
            "--bin-dir".into(),
            self.bin_dir().display().to_string(),
            "--conf-dir".into(),
            self.conf_dir().display().to_string(),
            "--record".into(),
            self.record().display().to_string(),
        ];
        for (k, v) in [
            ("NETWORK", "podnet".to_string()),
            ("PLUGIN_DIR", self.plugin_dir().display().to_string()),
            ("CACHE_DIR", self.cache_dir().display().to_string()),
            ("STATE_DIR", self.state_dir().display().to_string()),
            ("MTU", "1400".to_string()),
            ("POD_CIDR", "10.231.0.0/24".to_string()),
        ] {
            args.push("--set".into());
            args.push(format!("{k}={v}"));
        }
        args
    }

    /// Every file under the root but the template, with its content.
    fn files(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        walk(self.root.path(), &mut out);
        out.retain(|(p, _)| !p.ends_with("template.json"));
        out.sort();
        out
    }
}

fn walk(dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        let m = fs::symlink_metadata(&p).unwrap();
        if m.is_dir() {
            walk(&p, out);
        } else if m.file_type().is_symlink() {
            out.push((
                p.clone(),
                fs::read_link(&p)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes(),
            ));
        } else {
            out.push((p.clone(), fs::read(&p).unwrap()));
        }
    }
}

fn run(bin: &Path, args: &[String]) -> (i32, String, String) {
    // The test copied `bin` a moment ago (installed files themselves are
    // closed before they are renamed in).
    let out = output_of_copied(Command::new(bin).args(args).env_clear()).unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn uninstall(node: &Node, bin: &Path, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec![
        "uninstall".to_string(),
        "--record".into(),
        node.record().display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    run(bin, &args)
}

fn mode(p: &Path) -> u32 {
    fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

/// Install with `args` must fail with every one of `expect` in its error
/// and leave every file under the node as it was.
fn refused(node: &Node, image: &Image, args: &[String], what: &str, expect: &[&str]) {
    let before = node.files();
    let (code, out, err) = run(&image.bin(), args);
    assert_eq!(code, 1, "{what}: {out}\n{err}");
    for e in expect {
        assert!(err.contains(e), "{what}: expected {e:?} in {err}");
    }
    assert_eq!(node.files(), before, "{what}: something was written");
}

#[test]
fn install_lays_out_the_node_and_uninstall_removes_exactly_that() {
    if !is_root("install_lays_out_the_node_and_uninstall_removes_exactly_that") {
        return;
    }
    let image = Image::new("layout");
    let node = Node::new("layout");
    let before = node.files();
    let conf_inode = fs::metadata(node.conf_dir()).unwrap().ino();
    let template = node.template();

    let (code, out, err) = run(&image.bin(), &node.install_args(&template));
    assert_eq!(code, 0, "install failed:\n{out}\n{err}");

    // The conflist: rendered, 0600 root, valid for ADD, sorted first.
    let conflist: Value = serde_json::from_slice(&fs::read(node.conflist()).unwrap()).unwrap();
    assert_eq!(conflist["name"], "podnet");
    let entry = &conflist["plugins"][0]["chain"][0];
    assert_eq!(
        entry["mtu"], 1400,
        "a whole-string number placeholder is a number"
    );
    assert_eq!(entry["ipam"]["ranges"][0][0]["subnet"], "10.231.0.0/24");
    assert_eq!(mode(&node.conflist()), 0o600);
    assert_eq!(fs::metadata(node.conflist()).unwrap().uid(), 0);
    // Binaries 0755: the client as `wasm-cni` and the engine beside it, or
    // the engine alone.
    let engine_name = if image.has_client() {
        "wasm-cni-engine"
    } else {
        "wasm-cni"
    };
    let engine = node.bin_dir().join(engine_name);
    assert_eq!(fs::read(&engine).unwrap(), fs::read(image.bin()).unwrap());
    assert_eq!(mode(&engine), 0o755);
    assert_eq!(mode(&node.bin_dir().join("wasm-cni")), 0o755);
    if image.has_client() {
        assert_eq!(
            fs::read(node.bin_dir().join("wasm-cni")).unwrap(),
            fs::read(image.dir.join("wasm-cni-client")).unwrap()
        );
    }
    // The installed binary answers.
    let (code, out, _) = run(&node.bin_dir().join("wasm-cni"), &["--version".into()]);
    assert_eq!(code, 0);
    assert!(out.starts_with("wasm-cni "), "{out}");
    // Components 0644, and precompiled into the conflist's cache.
    for name in ["bridge.wasm", "host-local.wasm"] {
        let p = node.plugin_dir().join(name);
        assert_eq!(
            fs::read(&p).unwrap(),
            fs::read(image.dir.join("components").join(name)).unwrap()
        );
        assert_eq!(mode(&p), 0o644);
    }
    let artifacts = fs::read_dir(node.cache_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
        .count();
    assert_eq!(artifacts, 2, "both components precompiled");
    // Nothing else touched, and the conf dir is the same directory.
    let after = node.files();
    for (p, bytes) in &before {
        let now = after.iter().find(|(q, _)| q == p).map(|(_, b)| b);
        assert_eq!(now, Some(bytes), "{} changed", p.display());
    }
    assert_eq!(fs::metadata(node.conf_dir()).unwrap().ino(), conf_inode);

    // Again, unchanged: nothing is written (the conflist keeps its inode).
    let inode = fs::metadata(node.conflist()).unwrap().ino();
    let (code, out, err) = run(&image.bin(), &node.install_args(&template));
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        !out.contains("installed "),
        "a second install wrote files:\n{out}"
    );
    assert!(out.contains("up to date"), "{out}");
    assert_eq!(fs::metadata(node.conflist()).unwrap().ino(), inode);

    // Uninstall: exactly what install wrote is gone, the rest as before.
    let (code, out, err) = uninstall(&node, &image.bin(), &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(node.files(), before, "uninstall left or removed something");
    assert!(node.conf_dir().is_dir() && node.bin_dir().is_dir());
    assert_eq!(fs::metadata(node.conf_dir()).unwrap().ino(), conf_inode);
}

#[test]
fn install_refuses_paths_it_did_not_write() {
    if !is_root("install_refuses_paths_it_did_not_write") {
        return;
    }
    let image = Image::new("refuse");
    let node = Node::new("refuse");
    let template = node.template();

    // Someone else's conflist at our name.
    fs::write(node.conflist(), b"{\"theirs\": true}").unwrap();
    let args = node.install_args(&template);
    refused(
        &node,
        &image,
        &args,
        "someone else's conflist",
        &["00-wasm-cni.conflist", "not written by wasm-cni install"],
    );

    // A link planted at our name, pointing at a file to overwrite.
    let victim = node.root.join("victim");
    fs::write(&victim, b"precious").unwrap();
    fs::remove_file(node.conflist()).unwrap();
    std::os::unix::fs::symlink(&victim, node.conflist()).unwrap();
    refused(
        &node,
        &image,
        &args,
        "a planted link",
        &["not a regular file"],
    );
    assert_eq!(fs::read(&victim).unwrap(), b"precious");

    // Someone else's binary at our name in the bin dir.
    fs::remove_file(node.conflist()).unwrap();
    fs::write(node.bin_dir().join("wasm-cni"), b"#!/bin/sh\necho theirs\n").unwrap();
    refused(
        &node,
        &image,
        &args,
        "someone else's binary",
        &["opt/cni/bin/wasm-cni", "not written by wasm-cni install"],
    );
}

#[test]
fn bad_input_names_the_cause_and_writes_nothing() {
    if !is_root("bad_input_names_the_cause_and_writes_nothing") {
        return;
    }
    let image = Image::new("bad");
    let node = Node::new("bad");
    let good = node.template();
    let write_template = |name: &str, text: &str| {
        let p = node.root.join(name);
        fs::write(&p, text).unwrap();
        p
    };
    let not_json = write_template("t1.json", "{\"plugins\": [");
    let unknown = write_template(
        "t2.json",
        &fs::read_to_string(&good)
            .unwrap()
            .replace("${MTU}", "${NO_SUCH}"),
    );
    let relative = write_template(
        "t3.json",
        &fs::read_to_string(&good)
            .unwrap()
            .replace("${PLUGIN_DIR}", "relative/dir"),
    );
    let not_conflist = write_template(
        "t4.json",
        r#"{"cniVersion":"1.1.0","name":"x","type":"wasm-cni"}"#,
    );
    let cases: Vec<(&str, Vec<String>, &str)> = vec![
        (
            "a template that is not JSON",
            node.install_args(&not_json),
            "not JSON",
        ),
        (
            "a placeholder without a value",
            node.install_args(&unknown),
            "no --set for NO_SUCH",
        ),
        (
            "a config ADD refuses",
            node.install_args(&relative),
            "ADD would refuse it",
        ),
        (
            "not a conflist",
            node.install_args(&not_conflist),
            "not a conflist",
        ),
        (
            "a --set without =",
            [node.install_args(&good), vec!["--set".into(), "MTU".into()]].concat(),
            "expected NAME=VALUE",
        ),
        (
            "no template",
            node.install_args(&node.root.join("missing.json")),
            "missing.json",
        ),
        (
            "a deferred conflist no daemon would write",
            [node.install_args(&good), vec!["--defer-conflist".into()]].concat(),
            "does not use the daemon",
        ),
    ];
    for (what, args, expect) in cases {
        refused(&node, &image, &args, what, &[expect]);
    }

    // The conf dir is a file.
    let conf_file = node.root.join("conf-is-a-file");
    fs::write(&conf_file, b"x").unwrap();
    let mut args = node.install_args(&good);
    let at = args.iter().position(|a| a == "--conf-dir").unwrap();
    args[at + 1] = conf_file.display().to_string();
    refused(
        &node,
        &image,
        &args,
        "a conf dir that is a file",
        &["not a directory"],
    );

    // An unreadable component (a dangling link in the image).
    std::os::unix::fs::symlink(
        "/nonexistent/x.wasm",
        image.dir.join("components/broken.wasm"),
    )
    .unwrap();
    let args = node.install_args(&good);
    refused(
        &node,
        &image,
        &args,
        "an unreadable component",
        &["broken.wasm"],
    );
}

#[test]
fn uninstall_leaves_a_file_changed_since() {
    if !is_root("uninstall_leaves_a_file_changed_since") {
        return;
    }
    let image = Image::new("changed");
    let node = Node::new("changed");
    let (code, out, err) = run(&image.bin(), &node.install_args(&node.template()));
    assert_eq!(code, 0, "{out}\n{err}");
    // An operator edits the conflist by hand.
    let mut text = fs::read_to_string(node.conflist()).unwrap();
    text.push(' ');
    fs::write(node.conflist(), &text).unwrap();
    let (code, out, err) = uninstall(&node, &image.bin(), &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(err.contains("changed since install wrote it"), "{err}");
    assert_eq!(fs::read_to_string(node.conflist()).unwrap(), text);
    assert!(!node.bin_dir().join("wasm-cni").exists());
    assert!(!node.record().exists());
}

/// A pod attached before uninstall stays deletable: while an attachment
/// remains, uninstall refuses and removes nothing (containerd deletes a pod
/// with the conflist it has loaded: tests/tests/kubernetes.rs shows it);
/// once the pod is gone, or with --force, uninstall removes everything.
#[test]
fn uninstall_keeps_pods_deletable() {
    if !is_root("uninstall_keeps_pods_deletable") {
        return;
    }
    let image = Image::new("pods");
    let node = Node::new("pods");
    let host = Netns::new("inh");
    let pod = Netns::new("inp");
    let (code, out, err) = run(&image.bin(), &node.install_args(&node.template()));
    assert_eq!(code, 0, "{out}\n{err}");
    let net = Installed::new(&node.bin_dir(), &host, &node.conflist());
    let installed = node.bin_dir().join("wasm-cni");
    let netns = pod.path();
    let add = net.call("ADD", "pod1", &netns);
    assert_eq!(add.code, 0, "ADD: {}\n{}", add.stdout, add.stderr);
    let conflist = fs::read(node.conflist()).unwrap();
    let record = fs::read(node.record()).unwrap();

    let (code, out, err) = uninstall(&node, &image.bin(), &[]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        err.contains("1 attachment(s)") && err.contains("pod1") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(fs::read(node.conflist()).unwrap(), conflist);
    assert_eq!(fs::read(node.record()).unwrap(), record);
    assert!(installed.is_file() && node.plugin_dir().join("bridge.wasm").is_file());

    let del = net.call("DEL", "pod1", &netns);
    assert_eq!(
        del.code, 0,
        "DEL after the refused uninstall: {}\n{}",
        del.stdout, del.stderr
    );
    // --force goes through an attachment (and says what it strands).
    let add = net.call("ADD", "pod2", &netns);
    assert_eq!(add.code, 0, "ADD: {}\n{}", add.stdout, add.stderr);
    let (code, out, err) = uninstall(&node, &image.bin(), &["--force"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(err.contains("pod2"), "{err}");
    assert!(!installed.exists() && !node.plugin_dir().join("bridge.wasm").exists());
    assert!(!node.record().exists());
    assert!(
        node.bin_dir().join("bridge").is_file(),
        "someone else's file removed"
    );
}

/// Reinstalling a different build while calls run the installed binary:
/// the old file is renamed over, never written into, so no call sees
/// "Text file busy" or half a binary.
#[test]
fn reinstall_under_load_fails_no_call() {
    if !is_root("reinstall_under_load_fails_no_call") {
        return;
    }
    let a = Image::new("reload-a");
    let b = Image::new("reload-b");
    // A different build: same code, another digest (bytes after the ELF's
    // end are never loaded).
    let mut bytes = fs::read(b.bin()).unwrap();
    bytes.extend_from_slice(b"another build");
    fs::write(b.bin(), &bytes).unwrap();
    let node = Node::new("reload");
    let template = node.template();
    let (code, out, err) = run(&a.bin(), &node.install_args(&template));
    assert_eq!(code, 0, "{out}\n{err}");

    let installed = node.bin_dir().join("wasm-cni");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let caller = {
        let stop = stop.clone();
        let installed = installed.clone();
        std::thread::spawn(move || {
            let (mut calls, mut failures) = (0, Vec::new());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let out = Command::new(&installed)
                    .env_clear()
                    .env("CNI_COMMAND", "VERSION")
                    .output();
                calls += 1;
                match out {
                    Ok(o) if o.status.success() => {}
                    Ok(o) => failures.push(format!(
                        "{:?}: {}",
                        o.status,
                        String::from_utf8_lossy(&o.stderr)
                    )),
                    Err(e) => failures.push(e.to_string()),
                }
            }
            (calls, failures)
        })
    };
    for round in 0..6 {
        let image = if round % 2 == 0 { &b } else { &a };
        let (code, out, err) = run(&image.bin(), &node.install_args(&template));
        assert_eq!(code, 0, "round {round}: {out}\n{err}");
        assert!(
            out.contains("installed "),
            "round {round} wrote nothing:\n{out}"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (calls, failures) = caller.join().unwrap();
    assert!(calls > 6, "the loop made only {calls} calls");
    assert!(
        failures.is_empty(),
        "{} of {calls} calls failed: {failures:?}",
        failures.len()
    );
    let (code, _, _) = uninstall(&node, &a.bin(), &[]);
    assert_eq!(code, 0);
}

/// A daemon started with `--publish-conflist`, killed when dropped.
struct Publisher(std::process::Child);

impl Drop for Publisher {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The runtime calls the node's network ready as soon as a conflist
/// exists: with `--defer-conflist` the daemon writes it, and only once a
/// STATUS sent the way the runtime sends it succeeds. While the daemon is
/// down later, the conflist stays (DEL must keep working) and STATUS says
/// 50.
#[test]
fn the_conflist_is_written_once_the_daemon_answers() {
    if !is_root("the_conflist_is_written_once_the_daemon_answers") {
        return;
    }
    let image = Image::new("ready");
    let node = Node::new("ready");
    let host = Netns::new("inrh");
    let pod = Netns::new("inrp");
    let socket = node.root.join("run/wasm-cni/daemon.sock");
    let mut t: Value = serde_json::from_slice(&fs::read(node.template()).unwrap()).unwrap();
    t["plugins"][0]["daemon"] = json!("require");
    t["plugins"][0]["daemonSocket"] = json!(socket);
    let template = node.root.join("daemon-template.json");
    fs::write(&template, serde_json::to_vec(&t).unwrap()).unwrap();
    let mut args = node.install_args(&template);
    args.push("--defer-conflist".into());
    let conf_before = fs::read_dir(node.conf_dir()).unwrap().count();
    let (code, out, err) = run(&image.bin(), &args);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("pending"), "{out}");
    assert!(
        !node.conflist().exists(),
        "written before the daemon answers"
    );
    assert_eq!(fs::read_dir(node.conf_dir()).unwrap().count(), conf_before);
    let engine = if image.has_client() {
        node.bin_dir().join("wasm-cni-engine")
    } else {
        node.bin_dir().join("wasm-cni")
    };
    let log = node.root.join("daemon.log");
    let daemon = |log: &Path| {
        Publisher(
            Command::new("ip")
                .args(["netns", "exec", &host.name])
                .arg(&engine)
                .args(["daemon", "--socket"])
                .arg(&socket)
                .arg("--publish-conflist")
                .arg(node.record())
                .stderr(fs::File::create(log).unwrap())
                .spawn()
                .unwrap(),
        )
    };
    // A local user's flock on the record's directory holds up nothing;
    // another installer's lock (root's) holds the publisher back only
    // while it is held.
    let _held = Holder::new(NOBODY, node.record().parent().unwrap());
    let installer = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(node.record().with_file_name(".install.json.lock"))
        .unwrap();
    flock_here(&installer);
    let mut d = daemon(&log);
    let started = std::time::Instant::now();
    while !fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("the conflist waits: the install record's lock")
    {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "{}",
            fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!node.conflist().exists(), "published under another's lock");
    drop(installer);
    while !node.conflist().exists() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "no conflist: {}",
            fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(mode(&node.conflist()), 0o600);
    let written: Value = serde_json::from_slice(&fs::read(node.conflist()).unwrap()).unwrap();
    assert_eq!(written["plugins"][0]["daemon"], "require");
    let record: Value = serde_json::from_slice(&fs::read(node.record()).unwrap()).unwrap();
    assert!(record.get("pending").is_none(), "{record}");
    assert!(record["files"]
        .get(node.conflist().to_str().unwrap())
        .is_some());
    // It says so (just after the rename).
    while !fs::read_to_string(&log)
        .unwrap()
        .contains("publish-conflist: the daemon answers; wrote")
    {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "{}",
            fs::read_to_string(&log).unwrap()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }

    // The runtime's calls, through the installed client and the daemon.
    let net = Installed::new(&node.bin_dir(), &host, &node.conflist());
    let netns = pod.path();
    let call = |verb: &str| net.call(verb, "ready1", &netns);
    let add = call("ADD");
    assert_eq!(add.code, 0, "ADD: {}\n{}", add.stdout, add.stderr);

    // The daemon goes down: the conflist stays, STATUS is 50 at once.
    let _ = Command::new("kill")
        .args(["-TERM", &d.0.id().to_string()])
        .status();
    let _ = d.0.wait();
    assert!(node.conflist().exists());
    let status = call("STATUS");
    assert!(status.stdout.contains("\"code\": 50"), "{}", status.stdout);
    // Back up, with nothing pending: it serves DEL and writes nothing.
    d = daemon(&node.root.join("daemon2.log"));
    let del = call("DEL");
    assert_eq!(del.code, 0, "DEL: {}\n{}", del.stdout, del.stderr);
    drop(d);
    let (code, out, err) = uninstall(&node, &image.bin(), &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(!node.record().exists() && !node.conflist().exists());
}

/// A file planted at the conflist's path between `install --defer-conflist`
/// and the daemon's publishing is left as it is, and the daemon says why.
#[test]
fn a_file_planted_before_publishing_is_left_alone() {
    if !is_root("a_file_planted_before_publishing_is_left_alone") {
        return;
    }
    let image = Image::new("plant");
    let node = Node::new("plant");
    let host = Netns::new("inph");
    let socket = node.root.join("run/wasm-cni/daemon.sock");
    let mut t: Value = serde_json::from_slice(&fs::read(node.template()).unwrap()).unwrap();
    t["plugins"][0]["daemon"] = json!("prefer");
    t["plugins"][0]["daemonSocket"] = json!(socket);
    let template = node.root.join("daemon-template.json");
    fs::write(&template, serde_json::to_vec(&t).unwrap()).unwrap();
    let mut args = node.install_args(&template);
    args.push("--defer-conflist".into());
    let (code, out, err) = run(&image.bin(), &args);
    assert_eq!(code, 0, "{out}\n{err}");
    fs::write(node.conflist(), b"planted").unwrap();
    let log = node.root.join("daemon.log");
    let _d = Publisher(
        Command::new("ip")
            .args(["netns", "exec", &host.name])
            .arg(image.bin())
            .args(["daemon", "--socket"])
            .arg(&socket)
            .arg("--publish-conflist")
            .arg(node.record())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let started = std::time::Instant::now();
    while !fs::read_to_string(&log)
        .unwrap()
        .contains("was not written by wasm-cni install")
    {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "{}",
            fs::read_to_string(&log).unwrap()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(fs::read(node.conflist()).unwrap(), b"planted");
    let record: Value = serde_json::from_slice(&fs::read(node.record()).unwrap()).unwrap();
    assert!(record.get("pending").is_some(), "still pending: {record}");
}

/// What an attacker controls here: the API server's reply (or whatever
/// answers at its address): status, body, size, timing. What they must not
/// gain: a hang, a value that is not a CIDR (or adds JSON structure) in a
/// root-owned conflist, the token over plain HTTP, or anything written
/// after a refusal. Good replies fill ${POD_CIDR} after waiting out a node
/// without a CIDR yet and an API server that answers 503.
#[test]
fn pod_cidrs_come_from_the_api_server_or_a_clear_error() {
    if !is_root("pod_cidrs_come_from_the_api_server_or_a_clear_error") {
        return;
    }
    let image = Image::new("kube");
    let node = Node::new("kube");
    let ns = Netns::new("inkube");
    let api = KubeApi::start(&ns);
    let template = node.template();
    let args = |name: &str, extra: &[&str]| -> Vec<String> {
        // The API gives ${POD_CIDR}, and ${MTU} when asked to.
        let computed_mtu = extra.contains(&"--mtu-for-cluster-mode");
        let all = node.install_args(&template);
        let mut a = Vec::new();
        let mut i = 0;
        while i < all.len() {
            let given = all[i] == "--set"
                && all.get(i + 1).is_some_and(|v| {
                    v.starts_with("POD_CIDR=") || (computed_mtu && v.starts_with("MTU="))
                });
            if given {
                i += 2;
                continue;
            }
            a.push(all[i].clone());
            i += 1;
        }
        a.extend(
            [
                "--pod-cidr-from-node",
                name,
                "--api-server",
                "https://127.0.0.1:6443",
                "--api-token-file",
                api.dir.join("token").to_str().unwrap(),
                "--api-ca-file",
                api.dir.join("ca.pem").to_str().unwrap(),
            ]
            .iter()
            .map(|s| s.to_string()),
        );
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let run_ns = |args: &[String]| -> (i32, String, String, std::time::Duration) {
        let started = std::time::Instant::now();
        let out = Command::new("ip")
            .args(["netns", "exec", &ns.name])
            .arg(image.bin())
            .args(args)
            .env_clear()
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            started.elapsed(),
        )
    };
    let subnet = || -> String {
        let v: Value = serde_json::from_slice(&fs::read(node.conflist()).unwrap()).unwrap();
        v["plugins"][0]["chain"][0]["ipam"]["ranges"][0][0]["subnet"]
            .as_str()
            .unwrap()
            .to_string()
    };

    // Refusals first: each names the cause, in bounded time, and writes nothing.
    let before = node.files();
    let other_ca = TempDir::new("kube-other-ca");
    tls_certs(other_ca.path());
    let mut wrong_token = args("node-a", &[]);
    let at = wrong_token
        .iter()
        .position(|a| a == "--api-token-file")
        .unwrap();
    fs::write(other_ca.join("token"), "not-the-token").unwrap();
    wrong_token[at + 1] = other_ca.join("token").display().to_string();
    let mut wrong_ca = args("node-a", &[]);
    let at = wrong_ca.iter().position(|a| a == "--api-ca-file").unwrap();
    wrong_ca[at + 1] = other_ca.join("ca.pem").display().to_string();
    let mut plain = args("node-a", &[]);
    let at = plain.iter().position(|a| a == "--api-server").unwrap();
    plain[at + 1] = "http://127.0.0.1:6443".into();
    let cases: Vec<(&str, Vec<String>, &[&str], u64)> = vec![
        (
            "403",
            args("forbidden", &[]),
            &["403", "get on nodes", "cannot get resource"],
            3,
        ),
        ("401", wrong_token, &["401", "token"], 3),
        ("404", args("nosuch", &[]), &["no node \"nosuch\""], 3),
        ("another CA", wrong_ca, &["TLS"], 3),
        ("plain http", plain, &["not https"], 3),
        ("a lying CIDR", args("lies", &[]), &["is not a CIDR"], 3),
        // What a Node object says routes into the pod bridge: an API
        // object that could write it must not route the node's traffic.
        (
            "half of IPv4",
            args("half-the-internet", &[]),
            &["128.0.0.0/1 is wider than a /16"],
            3,
        ),
        (
            "everything",
            args("everything", &[]),
            &["0.0.0.0/0 is wider than a /16"],
            3,
        ),
        (
            "wider than the bound",
            args("wide", &[]),
            &[
                "10.64.0.0/12 is wider than a /16",
                "--min-pod-cidr-prefix-v4",
            ],
            3,
        ),
        ("a huge reply", args("huge", &[]), &["over the limit"], 3),
        (
            "a path in the name",
            args("../../x", &[]),
            &["not a node name"],
            3,
        ),
        (
            "a hang",
            args("hang", &["--api-wait-ms", "1500"]),
            &["no complete reply", "gave up after 1500 ms"],
            8,
        ),
        (
            "no CIDR ever",
            args("never", &["--api-wait-ms", "1000"]),
            &["no spec.podCIDRs yet", "gave up"],
            6,
        ),
        (
            "both --set and the API",
            args("node-a", &["--set", "POD_CIDR=10.9.0.0/24"]),
            &["choose one"],
            3,
        ),
    ];
    for (what, a, expect, secs) in cases {
        let (code, out, err, took) = run_ns(&a);
        assert_eq!(code, 1, "{what}: {out}\n{err}");
        for e in expect {
            assert!(err.contains(e), "{what}: expected {e:?} in {err}");
        }
        assert!(
            took < std::time::Duration::from_secs(secs),
            "{what}: {took:?}"
        );
        assert_eq!(node.files(), before, "{what}: something was written");
    }
    assert!(!api.requests().contains("../"), "{}", api.requests());

    // The operator may allow a wider one.
    let (code, out, err, _) = run_ns(&args("wide", &["--min-pod-cidr-prefix-v4", "12"]));
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(subnet(), "10.64.0.0/12");

    // A node whose CIDR comes on the third read.
    let (code, out, err, _) = run_ns(&args("late", &[]));
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(err.contains("no spec.podCIDRs yet"), "{err}");
    assert_eq!(subnet(), "10.244.7.0/24");
    // An API server that answers 503 first; dual-stack, v4 first.
    let (code, out, err, _) = run_ns(&args("flaky", &[]));
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(err.contains("503"), "{err}");
    assert_eq!(subnet(), "10.244.8.0/24");
    let (code, out, err, _) = run_ns(&args("node-a", &[]));
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(subnet(), "10.244.3.0/24");

    // ${MTU} for cluster mode: the MTU of the link holding the Node's
    // InternalIP (192.168.99.1, on a 1400-byte link here), less VXLAN's 50
    // bytes unless every peer is direct. The Node says which address; only
    // a link of this host that holds it gives the figure.
    for cmd in [
        "ip link add up0 mtu 1400 type veth peer name up0p",
        "ip addr add 192.168.99.1/24 dev up0",
        "ip link set up0 up",
    ] {
        ns.exec(&cmd.split(' ').collect::<Vec<_>>());
    }
    let mtu = || -> Option<u64> {
        let v: Value = serde_json::from_slice(&fs::read(node.conflist()).unwrap()).unwrap();
        v["plugins"][0]["chain"][0]["mtu"].as_u64()
    };
    for (mode, want) in [("auto", 1350), ("direct", 1400), ("vxlan", 1350)] {
        let (code, out, err, _) = run_ns(&args("node-mtu", &["--mtu-for-cluster-mode", mode]));
        assert_eq!(code, 0, "{mode}: {out}\n{err}");
        assert_eq!(mtu(), Some(want), "{mode}");
    }
    let before = node.files();
    for (what, a, expect) in [
        (
            "an InternalIP no link holds",
            args("node-far", &["--mtu-for-cluster-mode", "auto"]),
            "no link of this host holds the Node's InternalIP 192.168.98.7",
        ),
        (
            "both --set and the uplink",
            args(
                "node-mtu",
                &["--mtu-for-cluster-mode", "auto", "--set", "MTU=9000"],
            ),
            "--set MTU and --mtu-for-cluster-mode both give ${MTU}",
        ),
        (
            "a mode that is none",
            args("node-mtu", &["--mtu-for-cluster-mode", "fast"]),
            "fast",
        ),
        (
            "no Node to name the uplink",
            node.install_args(&template)
                .into_iter()
                .chain(["--mtu-for-cluster-mode".to_string(), "auto".to_string()])
                .collect(),
            "--mtu-for-cluster-mode needs --pod-cidr-from-node",
        ),
    ] {
        let (code, out, err, _) = run_ns(&a);
        assert_eq!(
            code,
            if what == "a mode that is none" { 2 } else { 1 },
            "{what}: {out}\n{err}"
        );
        assert!(err.contains(expect), "{what}: expected {expect:?} in {err}");
        assert_eq!(node.files(), before, "{what}: something was written");
    }
    let (code, out, err, _) = run_ns(&args("node-a", &[]));
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        api.requests()
            .lines()
            .filter(|l| l.contains("no-token"))
            .count()
            == 1,
        "only the wrong-token case goes without the token: {}",
        api.requests()
    );
    let (code, out, err) = uninstall(&node, &image.bin(), &[]);
    assert_eq!(code, 0, "{out}\n{err}");
}

/// A flock held by another process for the life of this value.
struct Holder(std::process::Child);

impl Holder {
    /// `flock -s PATH` by `who` (`setpriv` arguments, or none for root),
    /// once it holds the lock.
    fn new(who: &[&str], path: &Path) -> Holder {
        use std::io::BufRead;
        let mut cmd = match who.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest);
                c.arg("flock");
                c
            }
            None => Command::new("flock"),
        };
        // --no-fork: the process killed on drop is the one holding it.
        let mut child = cmd
            .args(["--no-fork", "-s"])
            .arg(path)
            .args(["-c", "echo held; exec sleep 600"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let out = child.stdout.take().unwrap();
        std::io::BufReader::new(out).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "held", "flock {}", path.display());
        Holder(child)
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const NOBODY: &[&str] = &[
    "setpriv",
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
];

/// What a local user (uid 65534) controls here: every file and directory of
/// the node it may open, and a flock needs nothing more. What it must not
/// gain: a wait of install, uninstall or the daemon's publisher. The
/// installer's lock was the record's directory, which anyone may open: a
/// shared flock on it made every installer wait without end. Now the lock
/// is a file only root opens, gone when the command is; the one holder an
/// installer waits for (another installer) makes it give up within
/// `--lock-wait-ms`, naming the holder, having written nothing.
#[test]
fn no_local_user_can_hold_the_installers_lock() {
    if !is_root("no_local_user_can_hold_the_installers_lock") {
        return;
    }
    let image = Image::new("lockuser");
    let node = Node::new("lockuser");
    let template = node.template();
    let record_dir = node.record().parent().unwrap().to_path_buf();
    fs::create_dir_all(&record_dir).unwrap();
    let _dir_held = Holder::new(NOBODY, &record_dir);
    let _root_held = Holder::new(NOBODY, node.root.path());
    // Bounded here (an installer that waits for the holder would wait
    // without end): `timeout` ends it, and the exit says so.
    let mut bounded = vec!["30".to_string(), image.bin().display().to_string()];
    bounded.extend(node.install_args(&template));
    let (code, out, err) = run(Path::new("/usr/bin/timeout"), &bounded);
    assert_eq!(code, 0, "install waited for a local user:\n{out}\n{err}");
    let lock = record_dir.join(".install.json.lock");
    assert!(!lock.exists(), "install left its lock behind");

    // Another installer (root, so the one holder that counts) holds it:
    // this one gives up within its bound, naming it, and writes nothing.
    let lock_file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&lock)
        .unwrap();
    flock_here(&lock_file);
    let before = node.files();
    let mut args = node.install_args(&template);
    args.extend(["--lock-wait-ms".into(), "300".into()]);
    let started = std::time::Instant::now();
    let (code, out, err) = run(&image.bin(), &args);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    let me = format!("pid {}", std::process::id());
    assert!(
        err.contains("the install record's lock") && err.contains(&me) && err.contains("300 ms"),
        "{err}"
    );
    assert_eq!(
        node.files(),
        before,
        "written while another installer held the lock"
    );
    let (code, _, err) = uninstall(&node, &image.bin(), &["--lock-wait-ms", "300"]);
    assert_eq!(code, 1);
    assert!(err.contains(&me), "{err}");
    drop(lock_file);

    // A lock file that is not root's is nobody's lock: refused, named.
    fs::write(&lock, b"").unwrap();
    sh_ok(&["chown", "65534:65534", lock.to_str().unwrap()]);
    let (code, _, err) = run(&image.bin(), &node.install_args(&template));
    assert_eq!(code, 1);
    assert!(err.contains("owned by uid 65534"), "{err}");
    fs::remove_file(&lock).unwrap();

    let (code, out, err) = uninstall(&node, &image.bin(), &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(!node.record().exists() && !lock.exists());
}

/// An exclusive flock on `file`, held by this process until it is closed.
fn flock_here(file: &fs::File) {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid descriptor of `file`, which outlives the call.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(rc, 0, "flock: {}", std::io::Error::last_os_error());
}

fn sh_ok(args: &[&str]) {
    let s = Command::new(args[0]).args(&args[1..]).status().unwrap();
    assert!(s.success(), "{args:?}");
}
