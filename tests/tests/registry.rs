//! Plugins from an OCI registry: `wasm-cni push` and `pull` against a real
//! registry (Debian docker-registry) and a lying one, in the test's node
//! namespace on 127.0.0.1; chains that load their components from the image
//! store by digest.

use std::path::{Path, PathBuf};
use std::process::{Command, Output as ProcOutput, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wasm_cni_tests::{
    is_root, plugin, python_venv, sh, wasm_cni_bin, workspace_root, Daemon, Invocation, Netns, Pod,
    Registry, TempDir,
};

/// `wasm-cni ARGS` inside `ns` with extra environment.
fn cli(ns: &Netns, env: &[(&str, &str)], args: &[&str]) -> ProcOutput {
    Command::new("ip")
        .args(["netns", "exec", &ns.name])
        .arg(wasm_cni_bin())
        .args(args)
        .env_remove("REGISTRY_AUTH_FILE")
        .env_remove("DOCKER_CONFIG")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run wasm-cni")
}

fn ok(out: ProcOutput) -> String {
    assert!(
        out.status.success(),
        "wasm-cni failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn err(out: ProcOutput) -> String {
    assert!(!out.status.success(), "wasm-cni succeeded unexpectedly");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn push(ns: &Netns, env: &[(&str, &str)], component: &Path, image: &str) -> ProcOutput {
    cli(
        ns,
        env,
        &["push", "--plain-http", component.to_str().unwrap(), image],
    )
}

/// Pull into the image store `dir`, compiling into the `cache` beside it
/// (the networks' cacheDir in these tests).
fn pull(ns: &Netns, env: &[(&str, &str)], dir: &Path, image: &str) -> ProcOutput {
    let cache = dir.with_file_name("cache");
    cli(
        ns,
        env,
        &[
            "pull",
            "--plain-http",
            "--timeout",
            "3",
            "--image-dir",
            dir.to_str().unwrap(),
            "--cache-dir",
            cache.to_str().unwrap(),
            image,
        ],
    )
}

/// A network whose chain names its components by image only: pluginDir is
/// empty.
fn conf(dir: &TempDir, images: &Path, bridge_like: &str, ipam: &str, subnet: &str) -> Value {
    std::fs::create_dir_all(dir.join("empty-plugins")).unwrap();
    json!({
        "cniVersion": "1.1.0", "name": "imgnet", "type": "wasm-cni",
        "pluginDir": dir.join("empty-plugins"), "stateDir": dir.join("state"),
        "cacheDir": dir.join("cache"), "imageDir": images,
        "chain": [{"type": "ptp", "wasm": {"image": bridge_like},
                   "ipam": {"type": "host-local", "subnet": subnet,
                            "wasm": {"image": ipam}}}],
    })
}

/// Push the ptp and host-local components as `ADDR/cni/NAME:v1`; their
/// references by digest.
fn push_ptp_and_host_local(ns: &Netns, addr: &str) -> (String, String) {
    let push_one = |name: &str| {
        ok(push(
            ns,
            &[],
            &plugin(name),
            &format!("{addr}/cni/{name}:v1"),
        ))
    };
    (push_one("ptp"), push_one("host-local"))
}

#[test]
fn push_pull_by_digest_and_run_a_chain_from_the_images() {
    if !is_root("push_pull_by_digest_and_run_a_chain_from_the_images") {
        return;
    }
    let pod = Pod::new("img");
    let reg = Registry::start(&pod.node, None);
    let addr = &reg.addr;
    let (ptp, ipam) = push_ptp_and_host_local(&pod.node, addr);
    assert!(ptp.starts_with(&format!("{addr}/cni/ptp@sha256:")), "{ptp}");
    // Pushing the same component again gives the same digest (the blobs are
    // there already and are not sent twice).
    let before = reg.requests();
    assert_eq!(
        ok(push(
            &pod.node,
            &[],
            &plugin("ptp"),
            &format!("{addr}/cni/ptp:v1")
        )),
        ptp
    );
    let log = reg.log();
    let again: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" HTTP/1.1\" "))
        .skip(before)
        .collect();
    assert!(
        again.iter().any(|l| l.contains("HEAD /v2/cni/ptp/blobs/")),
        "{again:?}"
    );
    assert!(
        !again.iter().any(|l| l.contains("/blobs/uploads/")),
        "uploaded again: {again:?}"
    );

    // A clean store: pull one by digest, the other by tag (which prints the
    // digest the push printed).
    let dir = TempDir::new("img");
    let images = dir.join("images");
    assert_eq!(ok(pull(&pod.node, &[], &images, &ptp)), ptp);
    let by_tag = pull(
        &pod.node,
        &[],
        &images,
        &format!("{addr}/cni/host-local:v1"),
    );
    assert!(String::from_utf8_lossy(&by_tag.stderr)
        .contains(&format!("{addr}/cni/host-local:v1 is {ipam}")));
    assert_eq!(ok(by_tag), ipam);
    let listed = ok(cli(
        &pod.node,
        &[],
        &["images", "ls", "--image-dir", images.to_str().unwrap()],
    ));
    assert!(
        listed.contains(&format!("{ptp}\t"))
            && listed.contains(&format!("{addr}/cni/host-local:v1\t")),
        "{listed}"
    );
    assert!(images.join("oci-layout").is_file());
    // Compiled at pull: the first ADD finds the artifacts.
    let artifacts = std::fs::read_dir(dir.join("cache"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".cwasm"))
        .count();
    assert_eq!(artifacts, 2);

    // A component this host cannot run (no plugin export, an import the
    // host does not provide) is refused at pull, and not recorded as pulled.
    let alien = dir.join("alien.wasm");
    std::fs::write(
        &alien,
        wat::parse_str(r#"(component (import "evil:world/x@1.0.0" (instance)))"#).unwrap(),
    )
    .unwrap();
    let alien_ref = ok(push(
        &pod.node,
        &[],
        &alien,
        &format!("{addr}/cni/alien:v1"),
    ));
    let e = err(pull(&pod.node, &[], &images, &alien_ref));
    assert!(
        e.contains("imports evil:world/x@1.0.0, which this host does not grant"),
        "{e}"
    );
    let hex = alien_ref.rsplit(':').next().unwrap();
    assert!(!images.join("blobs/sha256").join(hex).exists());

    // The registry goes away: the chain runs from the store alone.
    drop(reg);
    let conf = conf(&dir, &images, &ptp, &ipam, "10.214.1.0/24");
    let add = pod.run(Invocation::new("ADD").id("c1").ifname("eth0"), &conf);
    add.assert_ok();
    let r = add.json();
    assert_eq!(r["ips"][0]["address"], "10.214.1.2/24", "{r}");
    assert!(pod
        .ctr
        .exec(&["ip", "-o", "addr", "show", "eth0"])
        .contains("10.214.1.2/24"));
    pod.run(Invocation::new("CHECK").id("c1").ifname("eth0"), &{
        let mut c = conf.clone();
        c["prevResult"] = r.clone();
        c
    })
    .assert_ok();
    pod.run(Invocation::new("DEL").id("c1").ifname("eth0"), &conf)
        .assert_ok();
    assert!(pod.ctr.link("eth0").is_none());

    // A daemon serves the same network from the same store.
    let daemon = Daemon::start(&pod.node.name, &[]);
    let via = daemon.conf(&conf, "require");
    let add = pod.run(Invocation::new("ADD").id("c2").ifname("eth0"), &via);
    add.assert_ok();
    // .2 is in its reuseIPWait quarantine since c1's DEL.
    assert_eq!(add.json()["ips"][0]["address"], "10.214.1.3/24");
    pod.run(Invocation::new("DEL").id("c2").ifname("eth0"), &via)
        .assert_ok();
    assert!(daemon.log().contains("c2"), "{}", daemon.log());
    drop(daemon);

    // Removing an image deletes its blobs (and only its): the network's next
    // ADD says to pull it again.
    let rm = cli(
        &pod.node,
        &[],
        &[
            "images",
            "rm",
            "--image-dir",
            images.to_str().unwrap(),
            &ptp,
        ],
    );
    assert!(ok(rm).starts_with("removed "));
    let ls = ok(cli(
        &pod.node,
        &[],
        &["images", "ls", "--image-dir", images.to_str().unwrap()],
    ));
    assert!(
        !ls.contains("/cni/ptp") && ls.contains("/cni/host-local:v1"),
        "{ls}"
    );
    let add = pod.run(Invocation::new("ADD").id("c3").ifname("eth0"), &conf);
    assert_eq!(add.error_code(), 7);
    assert!(
        add.error_msg().contains(&format!("wasm-cni pull {ptp}")),
        "{}",
        add.error_msg()
    );
    let e = err(cli(
        &pod.node,
        &[],
        &[
            "images",
            "rm",
            "--image-dir",
            images.to_str().unwrap(),
            &ptp,
        ],
    ));
    assert!(e.contains("no image"), "{e}");
}

#[test]
fn tampered_blobs_and_wrong_digests_are_refused() {
    if !is_root("tampered_blobs_and_wrong_digests_are_refused") {
        return;
    }
    let pod = Pod::new("imt");
    let reg = Registry::start(&pod.node, None);
    let addr = &reg.addr;
    let tuning = ok(push(
        &pod.node,
        &[],
        &plugin("tuning"),
        &format!("{addr}/cni/tuning:v1"),
    ));
    let manifest_hex = tuning.rsplit(':').next().unwrap().to_string();
    let dir = TempDir::new("imt");
    let images = dir.join("images");
    let stored = |hex: &str| images.join("blobs/sha256").join(hex).exists();

    // A digest the registry has no manifest for.
    let unknown = format!("{addr}/cni/tuning@sha256:{}", "0".repeat(64));
    let e = err(pull(&pod.node, &[], &images, &unknown));
    assert!(e.contains("MANIFEST_UNKNOWN") || e.contains("404"), "{e}");

    // The registry's copy of the component changed: the pull stops at the
    // layer and stores no manifest.
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(reg.blob_data(&manifest_hex)).unwrap()).unwrap();
    let layer_hex = manifest["layers"][0]["digest"].as_str().unwrap()[7..].to_string();
    let layer = reg.blob_data(&layer_hex);
    let original = std::fs::read(&layer).unwrap();
    let mut tampered = original.clone();
    let last = tampered.len() - 1;
    tampered[last] ^= 0xff;
    std::fs::write(&layer, &tampered).unwrap();
    let e = err(pull(&pod.node, &[], &images, &tuning));
    assert!(e.contains("does not match its digest"), "{e}");
    assert!(
        !stored(&manifest_hex) && !stored(&layer_hex),
        "nothing stored"
    );
    std::fs::write(&layer, &original).unwrap();

    // The registry's copy of the manifest changed: the bytes no longer have
    // the digest asked for.
    let mpath = reg.blob_data(&manifest_hex);
    let mbytes = std::fs::read(&mpath).unwrap();
    let mut changed = mbytes.clone();
    changed.push(b'\n');
    std::fs::write(&mpath, &changed).unwrap();
    let e = err(pull(&pod.node, &[], &images, &tuning));
    assert!(
        e.contains("as the registry sent it") && e.contains("does not match its digest"),
        "{e}"
    );
    assert!(!stored(&manifest_hex));
    std::fs::write(&mpath, &mbytes).unwrap();

    // Whole again: the pull succeeds. Then the store's copy of the component
    // is damaged on disk: ADD refuses to run it (code 7), naming the digest.
    assert_eq!(ok(pull(&pod.node, &[], &images, &tuning)), tuning);
    let c = json!({
        "cniVersion": "1.1.0", "name": "imtnet", "type": "wasm-cni",
        "pluginDir": dir.join("plugins"), "stateDir": dir.join("state"),
        "cacheDir": dir.join("cache"), "imageDir": images,
        "chain": [{"type": "tuning", "wasm": {"image": tuning},
                   "sysctl": {"net.ipv4.conf.lo.arp_notify": "1"}}],
        "prevResult": {"cniVersion": "1.1.0", "interfaces": [{"name": "lo", "sandbox": pod.ctr.path()}]},
    });
    pod.run(Invocation::new("ADD").id("t1").ifname("lo"), &c)
        .assert_ok();
    // A sha256 pin beside the image must name the image's component.
    let mut pinned_wrong = c.clone();
    pinned_wrong["chain"][0]["wasm"]["sha256"] = json!("0".repeat(64));
    let add = pod.run(Invocation::new("ADD").id("t0").ifname("lo"), &pinned_wrong);
    assert_eq!(add.error_code(), 7, "{}", add.stdout);
    assert!(
        add.error_msg().contains("sha256 mismatch"),
        "{}",
        add.error_msg()
    );
    let mut pinned_right = c.clone();
    pinned_right["chain"][0]["wasm"]["sha256"] = json!(layer_hex.to_uppercase());
    pod.run(Invocation::new("CHECK").id("t1").ifname("lo"), &{
        let mut p = pinned_right;
        p["prevResult"] = c["prevResult"].clone();
        p
    })
    .assert_ok();
    pod.run(Invocation::new("DEL").id("t1").ifname("lo"), &c)
        .assert_ok();
    let stored_layer = images.join("blobs/sha256").join(&layer_hex);
    std::fs::write(&stored_layer, &tampered).unwrap();
    let add = pod.run(Invocation::new("ADD").id("t2").ifname("lo"), &c);
    assert_eq!(add.error_code(), 7, "{}", add.stdout);
    assert!(
        add.error_msg().contains("sha256 mismatch") && add.error_msg().contains(&layer_hex),
        "{}",
        add.error_msg()
    );
    // A pull repairs it: the damaged blob is fetched again.
    ok(pull(&pod.node, &[], &images, &tuning));
    assert_eq!(std::fs::read(&stored_layer).unwrap(), original);
}

#[test]
fn add_with_an_image_not_pulled_fails_clearly_and_contacts_nothing() {
    if !is_root("add_with_an_image_not_pulled_fails_clearly_and_contacts_nothing") {
        return;
    }
    let pod = Pod::new("imn");
    let reg = Registry::start(&pod.node, None);
    let addr = &reg.addr;
    let (ptp, ipam) = push_ptp_and_host_local(&pod.node, addr);
    let dir = TempDir::new("imn");
    let images = dir.join("images");
    // Only the interface plugin is pulled; its IPAM delegate is not.
    ok(pull(&pod.node, &[], &images, &ptp));
    let conf = conf(&dir, &images, &ptp, &ipam, "10.214.2.0/24");
    let before = reg.requests();
    assert!(before >= 4, "the registry logs requests:\n{}", reg.log());
    let node_before = pod.node.snapshot();
    let add = pod.run(Invocation::new("ADD").id("n1").ifname("eth0"), &conf);
    assert_eq!(add.error_code(), 7, "{}", add.stdout);
    let msg = add.error_msg();
    assert!(
        msg.contains("is not in the image store") && msg.contains(&format!("wasm-cni pull {ipam}")),
        "{msg}"
    );
    assert_eq!(
        reg.requests(),
        before,
        "ADD contacted the registry:\n{}",
        reg.log()
    );
    // Refused before any plugin ran: nothing made in either namespace.
    assert!(pod.ctr.link("eth0").is_none());
    assert_eq!(pod.node.snapshot(), node_before);

    // An image named by tag is refused in a chain: a tag can move.
    let tagged = conf
        .to_string()
        .replace(&ipam, &format!("{addr}/cni/host-local:v1"));
    let add = pod.run(
        Invocation::new("ADD").id("n2").ifname("eth0"),
        &serde_json::from_str(&tagged).unwrap(),
    );
    assert_eq!(add.error_code(), 7);
    assert!(
        add.error_msg().contains("named by tag only"),
        "{}",
        add.error_msg()
    );
    let bad = conf.to_string().replace(&ipam, "Not A Reference");
    let add = pod.run(
        Invocation::new("ADD").id("n3").ifname("eth0"),
        &serde_json::from_str(&bad).unwrap(),
    );
    assert_eq!(add.error_code(), 7);
    assert!(
        add.error_msg().contains("invalid image reference"),
        "{}",
        add.error_msg()
    );
    assert_eq!(reg.requests(), before);

    // `pull --conf` fetches what the network names, into its own imageDir
    // and cacheDir; then the same ADD works.
    let conf_file = dir.join("net.conflist");
    let conflist = json!({"cniVersion": "1.1.0", "name": "imgnet", "plugins": [conf]});
    std::fs::write(&conf_file, conflist.to_string()).unwrap();
    let pulled = cli(
        &pod.node,
        &[],
        &[
            "pull",
            "--plain-http",
            "--conf",
            conf_file.to_str().unwrap(),
        ],
    );
    assert!(
        String::from_utf8_lossy(&pulled.stderr).contains("already in the store"),
        "ptp was pulled before"
    );
    assert_eq!(ok(pulled), format!("{ptp}\n{ipam}"));
    std::fs::write(&conf_file, tagged).unwrap();
    let e = err(cli(
        &pod.node,
        &[],
        &[
            "pull",
            "--plain-http",
            "--conf",
            conf_file.to_str().unwrap(),
        ],
    ));
    assert!(e.contains("named by tag only"), "{e}");
    pod.run(Invocation::new("ADD").id("n1").ifname("eth0"), &conf)
        .assert_ok();
    pod.run(Invocation::new("DEL").id("n1").ifname("eth0"), &conf)
        .assert_ok();
}

#[test]
fn credentials_come_from_podman_and_docker_auth_files() {
    if !is_root("credentials_come_from_podman_and_docker_auth_files") {
        return;
    }
    let node = Netns::new("ima");
    let reg = Registry::start(&node, Some(("alice", "s3cr:et")));
    let addr = reg.addr.clone();
    let dir = TempDir::new("ima");
    let images = dir.join("images");
    let image = format!("{addr}/team/tuning:v1");

    let e = err(push(&node, &[], &plugin("tuning"), &image));
    assert!(
        e.contains("unauthorized") && e.contains("podman login"),
        "{e}"
    );

    // podman's auth.json via REGISTRY_AUTH_FILE, with a repository-scoped
    // entry beside a wrong host-wide one: the most specific wins.
    let b64 = |s: &str| {
        let out = Command::new("base64")
            .arg("-w0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        out.stdin.as_ref().unwrap().write_all(s.as_bytes()).unwrap();
        String::from_utf8(out.wait_with_output().unwrap().stdout).unwrap()
    };
    let podman = dir.join("auth.json");
    std::fs::write(
        &podman,
        json!({"auths": {
            addr.clone(): {"auth": b64("alice:wrong")},
            format!("{addr}/team"): {"auth": b64("alice:s3cr:et")},
        }})
        .to_string(),
    )
    .unwrap();
    let podman_env = [("REGISTRY_AUTH_FILE", podman.to_str().unwrap())];
    let pinned = ok(push(&node, &podman_env, &plugin("tuning"), &image));
    assert_eq!(ok(pull(&node, &podman_env, &images, &image)), pinned);

    // docker's config.json under DOCKER_CONFIG, legacy https:// key.
    let docker = dir.join("docker");
    std::fs::create_dir_all(&docker).unwrap();
    std::fs::write(
        docker.join("config.json"),
        json!({"auths": {format!("https://{addr}/v1/"): {"auth": b64("alice:s3cr:et")}}})
            .to_string(),
    )
    .unwrap();
    let docker_env = [
        ("DOCKER_CONFIG", docker.to_str().unwrap()),
        ("HOME", "/nonexistent"),
    ];
    assert_eq!(
        ok(pull(&node, &docker_env, &dir.join("images2"), &pinned)),
        pinned
    );

    // A wrong password is refused, naming the file it came from.
    std::fs::write(
        &podman,
        json!({"auths": {addr.clone(): {"auth": b64("alice:nope")}}}).to_string(),
    )
    .unwrap();
    let e = err(pull(&node, &podman_env, &dir.join("images3"), &pinned));
    assert!(
        e.contains("refused") && e.contains(podman.to_str().unwrap()),
        "{e}"
    );
}

/// The lying registry (tests/fixtures/hostile-registry.py) in `ns`.
struct Liar(std::process::Child);

impl Liar {
    fn start(ns: &Netns) -> Liar {
        let child = Command::new("ip")
            .args(["netns", "exec", &ns.name, "python3"])
            .arg(workspace_root().join("tests/fixtures/hostile-registry.py"))
            .arg("5001")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3");
        let started = Instant::now();
        while !ns.try_exec(&["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/5001"]) {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the lying registry did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Liar(child)
    }
}

impl Drop for Liar {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_lying_registry_gets_clean_errors_within_the_timeout_and_stores_nothing() {
    if !is_root("a_lying_registry_gets_clean_errors_within_the_timeout_and_stores_nothing") {
        return;
    }
    let node = Netns::new("iml");
    let _liar = Liar::start(&node);
    let dir = TempDir::new("iml");
    let images = dir.join("images");
    for (repo, why) in [
        ("huge", "over the limit"),
        ("endless", "over the limit"),
        ("slow", "no complete reply within 3000 ms"),
        ("index", "image index"),
        ("loop", "too many redirects"),
        ("notjson", "not JSON"),
        ("liar", "its descriptor says"),
        ("wrongdigest", "the registry says its digest is"),
        ("core", "core module"),
        ("missing", "NAME_UNKNOWN"),
    ] {
        let started = Instant::now();
        let e = err(pull(
            &node,
            &[],
            &images,
            &format!("127.0.0.1:5001/{repo}/x:1"),
        ));
        assert!(e.contains(why), "{repo}: {e}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{repo} took {:?}",
            started.elapsed()
        );
        assert!(!e.contains("panicked"), "{repo}: {e}");
        let blobs = images.join("blobs/sha256");
        let kept: Vec<_> = std::fs::read_dir(&blobs)
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        // The config of a lying artifact may be fetched, but never stored
        // before the whole artifact checked out.
        assert!(kept.is_empty(), "{repo}: stored {kept:?}");
    }
}

#[test]
fn over_tls_only_the_given_ca_is_trusted() {
    if !is_root("over_tls_only_the_given_ca_is_trusted") {
        return;
    }
    let node = Netns::new("imtls");
    let reg = Registry::start_tls(&node);
    let ca = reg.ca();
    let ca = ca.to_str().unwrap();
    let dir = TempDir::new("imtls");
    let images = dir.join("images");
    let image = format!("{}/cni/tuning:v1", reg.addr);
    let component = plugin("tuning");
    let component = component.to_str().unwrap();
    // The system's roots do not know the test's CA: refused, nothing sent.
    let e = err(cli(&node, &[], &["push", component, &image]));
    assert!(
        e.contains("TLS") && e.to_lowercase().contains("certificate"),
        "{e}"
    );
    let pinned = ok(cli(
        &node,
        &[],
        &["push", "--ca-file", ca, component, &image],
    ));
    let images_arg = images.to_str().unwrap();
    let cache = dir.join("cache");
    let pulled = ok(cli(
        &node,
        &[],
        &[
            "pull",
            "--ca-file",
            ca,
            "--image-dir",
            images_arg,
            "--cache-dir",
            cache.to_str().unwrap(),
            &pinned,
        ],
    ));
    assert_eq!(pulled, pinned);
    // Plain HTTP to a TLS port is a clean error too.
    let e = err(cli(
        &node,
        &[],
        &[
            "pull",
            "--plain-http",
            "--timeout",
            "3",
            "--image-dir",
            images_arg,
            &pinned,
        ],
    ));
    assert!(!e.contains("panicked"), "{e}");
}

/// The second implementation of the signature format: PyPI `cryptography`
/// driven by `tests/fixtures/cosign_interop.py`, inside `ns`.
fn interop(ns: &Netns, args: &[&str]) -> (bool, String) {
    let venv = python_venv("cosign-interop", "cryptography==43.0.3");
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.name])
        .arg(venv.join("bin/python"))
        .arg(workspace_root().join("tests/fixtures/cosign_interop.py"))
        .args(args)
        .output()
        .expect("run cosign_interop.py");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A key pair made by the second implementation: (private, public).
fn keygen(ns: &Netns, dir: &TempDir, name: &str) -> (PathBuf, PathBuf) {
    let (private, public) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.pub")),
    );
    let (ok, out) = interop(
        ns,
        &[
            "keygen",
            private.to_str().unwrap(),
            public.to_str().unwrap(),
        ],
    );
    assert!(ok, "{out}");
    (private, public)
}

fn policy(dir: &TempDir, name: &str, rules: Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, json!({ "rules": rules }).to_string()).unwrap();
    path
}

fn pull_under(ns: &Netns, images: &Path, image: &str, policy: &Path) -> ProcOutput {
    cli(
        ns,
        &[],
        &[
            "pull",
            "--plain-http",
            "--timeout",
            "3",
            "--image-dir",
            images.to_str().unwrap(),
            "--cache-dir",
            images.with_file_name("cache").to_str().unwrap(),
            "--trust-policy",
            policy.to_str().unwrap(),
            image,
        ],
    )
}

/// `wasm-cni push --sign KEY` of a bundled component.
fn push_signed(ns: &Netns, key: &Path, component: &str, image: &str) -> ProcOutput {
    cli(
        ns,
        &[],
        &[
            "push",
            "--plain-http",
            "--sign",
            key.to_str().unwrap(),
            plugin(component).to_str().unwrap(),
            image,
        ],
    )
}

fn digest_of(by_digest: &str) -> &str {
    by_digest.rsplit_once('@').map_or("", |(_, d)| d)
}

/// Signatures made by `push --sign` verify with `cryptography`, and those
/// `cryptography` makes verify in `pull`; a chain runs from signed images,
/// and every load checks them against the policy of the day.
#[test]
fn signatures_round_trip_with_a_second_implementation_and_loads_check_them_again() {
    if !is_root("signatures_round_trip_with_a_second_implementation") {
        return;
    }
    let pod = Pod::new("sig");
    let reg = Registry::start(&pod.node, None);
    let addr = reg.addr.clone();
    let dir = TempDir::new("sig");
    let (a_key, a_pub) = keygen(&pod.node, &dir, "a");
    let (_, b_pub) = keygen(&pod.node, &dir, "b");

    // Ours, verified by theirs.
    let out = push_signed(&pod.node, &a_key, "ptp", &format!("{addr}/cni/ptp:v1"));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let ptp = ok(out);
    assert!(stderr.contains("signature pushed as"), "{stderr}");
    let (verified, why) = interop(
        &pod.node,
        &[
            "verify-image",
            &addr,
            "cni/ptp",
            digest_of(&ptp),
            a_pub.to_str().unwrap(),
        ],
    );
    assert!(verified, "cryptography does not verify ours: {why}");
    let (verified, _) = interop(
        &pod.node,
        &[
            "verify-image",
            &addr,
            "cni/ptp",
            digest_of(&ptp),
            b_pub.to_str().unwrap(),
        ],
    );
    assert!(!verified, "another key verifies it");

    // Theirs, verified by ours.
    let ipam = ok(push(
        &pod.node,
        &[],
        &plugin("host-local"),
        &format!("{addr}/cni/host-local:v1"),
    ));
    let (signed, why) = interop(
        &pod.node,
        &[
            "sign-image",
            &addr,
            "cni/host-local",
            digest_of(&ipam),
            a_key.to_str().unwrap(),
        ],
    );
    assert!(signed, "{why}");

    let trust_a = policy(
        &dir,
        "a.json",
        json!([{"match": format!("{addr}/cni/*"), "action": "verify", "keys": ["a.pub"]}]),
    );
    let images = dir.join("images");
    for image in [&ptp, &ipam] {
        let out = pull_under(&pod.node, &images, image, &trust_a);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        ok(out);
        assert!(
            stderr.contains(&format!("signature verified with {}", a_pub.display()))
                && stderr.contains("(rule 1 of"),
            "{stderr}"
        );
    }
    assert!(images
        .join("signatures")
        .join(format!("{}.json", &digest_of(&ptp)[7..]))
        .exists());

    // A chain from the signed images, loaded under the policy.
    drop(reg);
    let conf = conf(&dir, &images, &ptp, &ipam, "10.215.1.0/24");
    let run = |verb, id, policy: &Path| {
        pod.run(
            Invocation::new(verb)
                .id(id)
                .env("WASM_CNI_TRUST_POLICY", policy.to_str().unwrap()),
            &conf,
        )
    };
    run("ADD", "s1", &trust_a).assert_ok();

    // The policy changes after the pull: the next load checks again.
    let deny_ptp = policy(
        &dir,
        "deny.json",
        json!([{"match": format!("{addr}/cni/ptp"), "action": "deny"},
               {"match": "*", "action": "skip"}]),
    );
    let out = run("ADD", "s2", &deny_ptp);
    assert_eq!(out.error_code(), 7, "{}", out.stdout);
    assert!(
        out.error_msg()
            .contains(&format!("{addr}/cni/ptp: denied by rule 1")),
        "{}",
        out.error_msg()
    );
    let only_b = policy(
        &dir,
        "b.json",
        json!([{"match": "*", "action": "verify", "keys": ["b.pub"]}]),
    );
    let out = run("ADD", "s2", &only_b);
    assert_eq!(out.error_code(), 7, "{}", out.stdout);
    assert!(
        out.error_msg().contains("is not by any key of the rule"),
        "{}",
        out.error_msg()
    );
    assert!(
        out.error_msg()
            .contains("`wasm-cni pull` it again under this policy"),
        "{}",
        out.error_msg()
    );

    // The kept signatures are read back as untrusted as a registry's reply:
    // another image's valid signature put in their place does not pass.
    let kept = |image: &str| {
        images
            .join("signatures")
            .join(format!("{}.json", &digest_of(image)[7..]))
    };
    let ptp_kept = std::fs::read(kept(&ptp)).unwrap();
    std::fs::copy(kept(&ipam), kept(&ptp)).unwrap();
    let out = run("ADD", "s2", &trust_a);
    assert_eq!(out.error_code(), 7, "{}", out.stdout);
    assert!(
        out.error_msg().contains(&format!(
            "a signature names manifest {}, not {}",
            digest_of(&ipam),
            digest_of(&ptp)
        )),
        "{}",
        out.error_msg()
    );
    std::fs::write(kept(&ptp), ptp_kept).unwrap();

    // Through a daemon its operator's policy decides: a peer's own
    // WASM_CNI_TRUST_POLICY (a policy it wrote to let anything in) is not
    // read. The peer here is root; a non-root peer gets no more.
    let daemon = Daemon::start(
        &pod.node.name,
        &["--trust-policy", deny_ptp.to_str().unwrap()],
    );
    let via = daemon.conf(&conf, "require");
    let lax = policy(&dir, "lax.json", json!([{"match": "*", "action": "skip"}]));
    let out = pod.run(
        Invocation::new("ADD")
            .id("s3")
            .env("WASM_CNI_TRUST_POLICY", lax.to_str().unwrap()),
        &via,
    );
    assert_eq!(out.error_code(), 7, "{}", out.stdout);
    assert!(
        out.error_msg().contains("denied by rule 1") && out.error_msg().contains("deny.json"),
        "{}",
        out.error_msg()
    );
    drop(daemon);

    run("DEL", "s1", &trust_a).assert_ok();
    assert!(pod.ctr.link("eth0").is_none());
}

/// Every way an image fails the policy is refused at pull, naming the rule
/// and the cause, and nothing of the image is stored.
#[test]
fn untrusted_images_are_refused_by_rule_and_nothing_is_stored() {
    if !is_root("untrusted_images_are_refused_by_rule_and_nothing_is_stored") {
        return;
    }
    let pod = Pod::new("untr");
    let reg = Registry::start(&pod.node, None);
    let addr = reg.addr.clone();
    let dir = TempDir::new("untr");
    let (a_key, _) = keygen(&pod.node, &dir, "a");
    let (_, _) = keygen(&pod.node, &dir, "b");
    let signed_by_a = |name: &str, component: &str| {
        ok(push_signed(
            &pod.node,
            &a_key,
            component,
            &format!("{addr}/cni/{name}:v1"),
        ))
    };
    let unsigned = |name: &str, component: &str| {
        ok(push(
            &pod.node,
            &[],
            &plugin(component),
            &format!("{addr}/cni/{name}:v1"),
        ))
    };
    let signed = signed_by_a("ptp", "ptp");
    let bare = unsigned("bare", "host-local");
    // Another image's valid signature, copied onto this one's tag.
    let other = unsigned("other", "tuning");
    let (done, why) = interop(
        &pod.node,
        &[
            "sign-image",
            &addr,
            "cni/other",
            digest_of(&signed),
            a_key.to_str().unwrap(),
            "--tag-digest",
            digest_of(&other),
        ],
    );
    assert!(done, "{why}");
    // The tag moved to a modified image; its old signature copied along.
    let moved_from = signed_by_a("moved", "loopback");
    let moved = unsigned("moved", "tap");
    assert_ne!(moved_from, moved);
    let (done, why) = interop(
        &pod.node,
        &[
            "copy-signature",
            &addr,
            "cni/moved",
            digest_of(&moved_from),
            digest_of(&moved),
        ],
    );
    assert!(done, "{why}");
    // Malformed signature objects.
    let garbled = unsigned("garbled", "static");
    let (done, why) = interop(
        &pod.node,
        &[
            "sign-image",
            &addr,
            "cni/garbled",
            digest_of(&garbled),
            a_key.to_str().unwrap(),
            "--signature",
            "bm90IGEgc2lnbmF0dXJl",
        ],
    );
    assert!(done, "{why}");
    let unannotated = unsigned("unannotated", "firewall");
    let (done, why) = interop(
        &pod.node,
        &[
            "sign-image",
            &addr,
            "cni/unannotated",
            digest_of(&unannotated),
            a_key.to_str().unwrap(),
            "--no-annotation",
        ],
    );
    assert!(done, "{why}");

    let all = format!("{addr}/cni/*");
    let verify_with = |key: &str| json!([{"match": all, "action": "verify", "keys": [key]}]);
    let cases: Vec<(&str, &String, Value, Vec<String>)> = vec![
        (
            "wrong key",
            &signed,
            verify_with("b.pub"),
            vec!["rule 1".into(), "is not by any key of the rule".into()],
        ),
        (
            "no signature",
            &bare,
            verify_with("a.pub"),
            vec!["wants a signature by one of its keys: no signature".into()],
        ),
        (
            "another digest",
            &other,
            verify_with("a.pub"),
            vec![format!(
                "a signature names manifest {}, not {}",
                digest_of(&signed),
                digest_of(&other)
            )],
        ),
        (
            "modified manifest",
            &moved,
            verify_with("a.pub"),
            vec![format!(
                "a signature names manifest {}",
                digest_of(&moved_from)
            )],
        ),
        (
            "bad signature bytes",
            &garbled,
            verify_with("a.pub"),
            vec!["is not by any key of the rule".into()],
        ),
        (
            "no annotation",
            &unannotated,
            verify_with("a.pub"),
            vec!["has no dev.cosignproject.cosign/signature annotation".into()],
        ),
        (
            "deny",
            &signed,
            json!([{"match": format!("{addr}/cni/ptp"), "action": "deny"}, {"match": "*", "action": "skip"}]),
            vec![format!(
                "{addr}/cni/ptp: denied by rule 1 (\"{addr}/cni/ptp\")"
            )],
        ),
        (
            "no rule",
            &signed,
            json!([{"match": "elsewhere/*", "action": "skip"}]),
            vec!["no rule of the trust policy".into()],
        ),
    ];
    for (i, (what, image, rules, expected)) in cases.iter().enumerate() {
        let file = policy(&dir, &format!("p{i}.json"), rules.clone());
        let images = dir.join(format!("images{i}"));
        let e = err(pull_under(&pod.node, &images, image, &file));
        for x in expected {
            assert!(e.contains(x.as_str()), "{what}: {e}");
        }
        assert!(
            e.contains(file.to_str().unwrap()),
            "{what}: names the policy: {e}"
        );
        let stored = std::fs::read_dir(images.join("blobs/sha256"))
            .map(|d| d.count())
            .unwrap_or(0);
        assert_eq!(stored, 0, "{what}: stored something");
        assert!(!images.join("index.json").exists(), "{what}");
    }

    // `skip` takes an unsigned image; a policy others could write is no
    // policy of the node's.
    let skip = policy(&dir, "skip.json", json!([{"match": "*", "action": "skip"}]));
    let out = pull_under(&pod.node, &dir.join("images-skip"), &bare, &skip);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    ok(out);
    assert!(
        stderr.contains("no signature needed (rule 1 of"),
        "{stderr}"
    );
    sh(&["chmod", "666", skip.to_str().unwrap()]);
    let e = err(pull_under(&pod.node, &dir.join("images-lax"), &bare, &skip));
    assert!(
        e.contains("skip.json is group- or world-writable (mode 666)"),
        "{e}"
    );
}

/// What a config controls here: the name it gives an image it pins by
/// digest. What it must not gain: an image the trust policy refuses, by
/// calling it something a rule lets through. The store finds an image by
/// its manifest digest alone, so the policy judges where the node pulled
/// that manifest from: a config must name one of those repositories, and
/// every one of them must pass. Naming an image pulled from `cni/evil`
/// (signed only by a key since revoked) as `dev/evil`, under a `skip` rule
/// for `dev/*`, once loaded and ran it.
#[test]
fn a_name_in_a_config_reaches_no_rule_the_pull_did_not() {
    if !is_root("a_name_in_a_config_reaches_no_rule_the_pull_did_not") {
        return;
    }
    let pod = Pod::new("prov");
    let reg = Registry::start(&pod.node, None);
    let addr = reg.addr.clone();
    let dir = TempDir::new("prov");
    keygen(&pod.node, &dir, "a");
    let (r_key, _) = keygen(&pod.node, &dir, "r");
    let images = dir.join("images");

    // Pulled while r was trusted; the IPAM from dev/, which needs nothing.
    let evil = ok(push_signed(
        &pod.node,
        &r_key,
        "ptp",
        &format!("{addr}/cni/evil:v1"),
    ));
    let ipam = ok(push(
        &pod.node,
        &[],
        &plugin("host-local"),
        &format!("{addr}/dev/host-local:v1"),
    ));
    let then = policy(
        &dir,
        "then.json",
        json!([{"match": format!("{addr}/cni/*"), "action": "verify", "keys": ["r.pub"]},
               {"match": format!("{addr}/dev/*"), "action": "skip"}]),
    );
    ok(pull_under(&pod.node, &images, &evil, &then));
    ok(pull_under(&pod.node, &images, &ipam, &then));
    drop(reg);

    // r is revoked: cni/* wants a's signature; dev/* is still skipped.
    let today = policy(
        &dir,
        "today.json",
        json!([{"match": format!("{addr}/dev/*"), "action": "skip"},
               {"match": format!("{addr}/cni/*"), "action": "verify",
                "keys": ["a.pub"]},
               {"match": "*", "action": "deny"}]),
    );
    let renamed = format!("{addr}/dev/evil@{}", digest_of(&evil));
    let run = |bridge_like: &str, id: &str| {
        pod.run(
            Invocation::new("ADD")
                .id(id)
                .env("WASM_CNI_TRUST_POLICY", today.to_str().unwrap()),
            &conf(&dir, &images, bridge_like, &ipam, "10.215.9.0/24"),
        )
    };
    let out = run(&renamed, "p1");
    assert_eq!(out.error_code(), 7, "the renamed image ran: {}", out.stdout);
    assert!(
        out.error_msg().contains(&format!(
            "pulled that manifest from {addr}/cni/evil, never from {addr}/dev/evil"
        )),
        "{}",
        out.error_msg()
    );
    assert!(pod.ctr.link("eth0").is_none(), "something of it ran");
    // Under its own name its rule refuses it, as it should.
    let out = run(&evil, "p2");
    assert_eq!(out.error_code(), 7, "{}", out.stdout);
    assert!(
        out.error_msg().contains("not by any key of the rule"),
        "{}",
        out.error_msg()
    );
    // Through the daemon, whose operator's policy decides, the same.
    let daemon = Daemon::start(&pod.node.name, &["--trust-policy", today.to_str().unwrap()]);
    let via = daemon.conf(
        &conf(&dir, &images, &renamed, &ipam, "10.215.9.0/24"),
        "require",
    );
    let out = pod.run(Invocation::new("ADD").id("p3"), &via);
    assert_eq!(out.error_code(), 7, "the renamed image ran: {}", out.stdout);
    assert!(
        out.error_msg().contains("never from"),
        "{}",
        out.error_msg()
    );
    drop(daemon);

    // One manifest pulled from two repositories, one of which a rule now
    // denies: denied under the other name too.
    let reg = Registry::start(&pod.node, None);
    let addr2 = reg.addr.clone();
    let both = dir.join("images-both");
    let lax = policy(&dir, "lax.json", json!([{"match": "*", "action": "skip"}]));
    let tool_dev = ok(push(
        &pod.node,
        &[],
        &plugin("ptp"),
        &format!("{addr2}/dev/tool:v1"),
    ));
    let tool_bad = ok(push(
        &pod.node,
        &[],
        &plugin("ptp"),
        &format!("{addr2}/bad/tool:v1"),
    ));
    assert_eq!(digest_of(&tool_dev), digest_of(&tool_bad), "one manifest");
    let ipam2 = ok(push(
        &pod.node,
        &[],
        &plugin("host-local"),
        &format!("{addr2}/dev/host-local:v1"),
    ));
    for image in [&tool_dev, &tool_bad, &ipam2] {
        ok(pull_under(&pod.node, &both, image, &lax));
    }
    drop(reg);
    let deny_bad = policy(
        &dir,
        "deny-bad.json",
        json!([{"match": format!("{addr2}/bad/*"), "action": "deny"},
               {"match": "*", "action": "skip"}]),
    );
    let out = pod.run(
        Invocation::new("ADD")
            .id("p4")
            .env("WASM_CNI_TRUST_POLICY", deny_bad.to_str().unwrap()),
        &conf(&dir, &both, &tool_dev, &ipam2, "10.215.10.0/24"),
    );
    assert_eq!(out.error_code(), 7, "{}", out.stdout);
    assert!(
        out.error_msg()
            .contains(&format!("{addr2}/bad/tool: denied by rule 1"))
            && out
                .error_msg()
                .contains("is the same manifest, pulled from there too"),
        "{}",
        out.error_msg()
    );
    // What no rule refuses runs, under the name it was pulled from.
    let out = pod.run(
        Invocation::new("ADD")
            .id("p5")
            .env("WASM_CNI_TRUST_POLICY", lax.to_str().unwrap()),
        &conf(&dir, &both, &tool_dev, &ipam2, "10.215.10.0/24"),
    );
    out.assert_ok();
    pod.run(
        Invocation::new("DEL")
            .id("p5")
            .env("WASM_CNI_TRUST_POLICY", lax.to_str().unwrap()),
        &conf(&dir, &both, &tool_dev, &ipam2, "10.215.10.0/24"),
    )
    .assert_ok();
}
