//! libcni-style chain execution inside one process, with fixture plugins.

use serde_json::json;
use wasm_cni_tests::{fixture, plugin_logs, Invocation, Sandbox};

fn sandbox(tag: &str) -> Sandbox {
    let sb = Sandbox::new(tag);
    sb.install(&fixture("fx"), "fx");
    sb
}

fn calls(stderr: &str) -> Vec<String> {
    plugin_logs(stderr).into_iter().map(|(_, m)| m).collect()
}

#[test]
fn add_passes_prev_result_in_order_and_del_runs_in_reverse() {
    let sb = sandbox("order");
    let conf = sb.conf(
        "1.1.0",
        "ordern",
        json!([{"type":"fx","tag":"a","ip":"10.9.0.2/24"},{"type":"fx","tag":"b"},{"type":"fx","tag":"c"}]),
    );
    let add = Invocation::new("ADD")
        .env("WASM_CNI_LOG", "info")
        .run(&conf);
    add.assert_ok();
    let r = add.json();
    let names: Vec<_> = r["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap().to_string())
        .collect();
    // Each plugin appended to the previous plugin's result.
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(r["ips"][0]["address"], "10.9.0.2/24");
    assert_eq!(calls(&add.stderr), ["a add", "b add", "c add"]);

    let check = Invocation::new("CHECK")
        .env("WASM_CNI_LOG", "info")
        .run(&conf);
    check.assert_ok();
    assert_eq!(calls(&check.stderr), ["a check", "b check", "c check"]);

    let del = Invocation::new("DEL")
        .env("WASM_CNI_LOG", "info")
        .run(&conf);
    del.assert_ok();
    assert_eq!(del.stdout, "");
    assert_eq!(calls(&del.stderr), ["c del", "b del", "a del"]);
}

#[test]
fn prev_result_from_the_runtime_feeds_the_first_plugin() {
    let sb = sandbox("prev");
    let mut conf = sb.conf("0.4.0", "prevn", json!([{"type":"fx","tag":"mine"}]));
    conf["prevResult"] = json!({
        "cniVersion":"0.4.0",
        "interfaces":[{"name":"eth0","sandbox":"/run/netns/x"}],
        "ips":[{"version":"4","address":"10.0.0.5/24","interface":0}]
    });
    let out = Invocation::new("ADD").run(&conf);
    out.assert_ok();
    let r = out.json();
    assert_eq!(r["interfaces"][0]["name"], "eth0");
    assert_eq!(r["interfaces"][1]["name"], "mine");
    assert_eq!(r["ips"][0]["version"], "4");
}

#[test]
fn del_continues_past_a_failing_plugin_and_reports_it() {
    let sb = sandbox("delfail");
    let conf = sb.conf(
        "1.1.0",
        "delfn",
        json!([{"type":"fx","tag":"a"},{"type":"fx","tag":"b","del":"fail","failCode":11},{"type":"fx","tag":"c","del":"trap"}]),
    );
    Invocation::new("ADD").run(&conf).assert_ok();
    let del = Invocation::new("DEL")
        .env("WASM_CNI_LOG", "info")
        .run(&conf);
    // Every plugin was asked, in reverse, despite two failures.
    assert_eq!(calls(&del.stderr), ["c del", "b del", "a del"]);
    // The first failure decides the code; both are reported.
    assert_eq!(del.error_code(), 999);
    let msg = del.error_msg();
    assert!(msg.contains("trapped"), "{msg}");
    assert!(msg.contains("b: del failed"), "{msg}");
    // The record is kept so a retried DEL still has the result.
    let retry = Invocation::new("DEL")
        .env("WASM_CNI_LOG", "info")
        .run(&sb.conf(
            "1.1.0",
            "delfn",
            json!([{"type":"fx","tag":"a"},{"type":"fx","tag":"b"},{"type":"fx","tag":"c"}]),
        ));
    retry.assert_ok();
}

#[test]
fn a_failed_add_is_rolled_back_in_reverse() {
    let sb = sandbox("rollback");
    // A plugin that reports its failure cleaned up after itself: only the
    // plugins before it are rolled back.
    let conf = sb.conf(
        "1.1.0",
        "rbn",
        json!([{"type":"fx","tag":"a"},{"type":"fx","tag":"b"},{"type":"fx","tag":"c","add":"fail"}]),
    );
    let add = Invocation::new("ADD")
        .env("WASM_CNI_LOG", "info")
        .run(&conf);
    assert_eq!(add.error_code(), 999);
    assert_eq!(
        calls(&add.stderr),
        ["a add", "b add", "c add", "b del", "a del"]
    );
    // A plugin the host had to stop gets a DEL too: it could not clean up.
    let stopped = sb.conf(
        "1.1.0",
        "rbn",
        json!([{"type":"fx","tag":"a"},{"type":"fx","tag":"b","add":"trap"}]),
    );
    let add = Invocation::new("ADD")
        .env("WASM_CNI_LOG", "info")
        .run(&stopped);
    assert_eq!(add.error_code(), 999);
    assert_eq!(calls(&add.stderr), ["a add", "b add", "b del", "a del"]);
    // Nothing was recorded for the failed attachment.
    let records = sb.state_dir().join("networks").join("rbn");
    let n = std::fs::read_dir(&records).map(|d| d.count()).unwrap_or(0);
    assert_eq!(n, 0);
}

#[test]
fn status_stops_at_the_first_failure_with_its_code() {
    let sb = sandbox("status");
    let conf = sb.conf(
        "1.1.0",
        "stn",
        json!([{"type":"fx","tag":"a"},{"type":"fx","tag":"b","status":"fail","failCode":50},{"type":"fx","tag":"c"}]),
    );
    let out = Invocation::new("STATUS")
        .env("WASM_CNI_LOG", "info")
        .run(&conf);
    assert_eq!(out.error_code(), 50);
    assert_eq!(calls(&out.stderr), ["a status", "b status"]);
}

#[test]
fn check_stops_at_the_first_failure() {
    let sb = sandbox("checkfail");
    let conf = sb.conf(
        "1.1.0",
        "ckn",
        json!([{"type":"fx","tag":"a","check":"fail"},{"type":"fx","tag":"b"}]),
    );
    Invocation::new("ADD").run(&conf).assert_ok();
    let out = Invocation::new("CHECK")
        .env("WASM_CNI_LOG", "info")
        .run(&conf);
    assert_eq!(out.error_code(), 999);
    assert_eq!(calls(&out.stderr), ["a check"]);
    // disableCheck skips plugins entirely.
    let mut off = conf.clone();
    off["disableCheck"] = json!(true);
    let out = Invocation::new("CHECK")
        .env("WASM_CNI_LOG", "info")
        .run(&off);
    out.assert_ok();
    assert!(calls(&out.stderr).is_empty());
}

#[test]
fn gc_deletes_stale_recorded_attachments_and_reaches_every_plugin() {
    let sb = sandbox("gc");
    let conf = sb.conf(
        "1.1.0",
        "gcn",
        json!([{"type":"fx","tag":"a","gc":"fail"},{"type":"fx","tag":"b"}]),
    );
    Invocation::new("ADD").id("keep").run(&conf).assert_ok();
    Invocation::new("ADD").id("stale").run(&conf).assert_ok();
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID":"keep","ifname":"eth0"}]);
    let out = Invocation::new("GC").env("WASM_CNI_LOG", "info").run(&gc);
    // The stale one was DELeted in reverse, then GC went to both plugins
    // even though the first failed.
    assert_eq!(calls(&out.stderr), ["b del", "a del", "a gc", "b gc"]);
    assert_eq!(out.error_code(), 999);
    let dir = sb.state_dir().join("networks").join("gcn");
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(left, ["keep:eth0.json"]);
}

#[test]
fn gc_with_null_means_nothing_is_valid_and_without_the_key_is_refused() {
    let sb = sandbox("gcnull");
    let conf = sb.conf("1.1.0", "gcnn", json!([{"type":"fx","tag":"a"}]));
    Invocation::new("ADD").id("x1").run(&conf).assert_ok();
    let out = Invocation::new("GC").run(&conf);
    assert_eq!(out.error_code(), 7);
    let mut gc = conf.clone();
    gc["cni.dev/attachments"] = json!(null);
    let out = Invocation::new("GC").env("WASM_CNI_LOG", "info").run(&gc);
    out.assert_ok();
    assert_eq!(calls(&out.stderr), ["a del", "a gc"]);
}

#[test]
fn a_late_del_for_an_old_container_does_not_touch_the_new_one() {
    let sb = sandbox("late");
    let conf = sb.conf("1.1.0", "laten", json!([{"type":"fx","tag":"a"}]));
    Invocation::new("ADD").id("old").run(&conf).assert_ok();
    Invocation::new("DEL").id("old").run(&conf).assert_ok();
    Invocation::new("ADD").id("new").run(&conf).assert_ok();
    Invocation::new("DEL").id("old").run(&conf).assert_ok();
    let rec = sb.state_dir().join("networks/laten/new:eth0.json");
    assert!(rec.is_file(), "the newer container's record must survive");
}

#[test]
fn ipam_is_an_in_process_call_released_by_the_host_if_the_plugin_cannot() {
    let sb = sandbox("ipamrb");
    sb.install(&fixture("fx-net"), "fx-net");
    // fx allocates through its IPAM delegate, then traps; its DEL traps
    // too before it can release, so the host releases the delegate itself.
    let conf = sb.conf(
        "1.1.0",
        "ipamrb",
        json!([{"type":"fx","tag":"a","callIpam":true,"ipam":{"type":"fx-net"},"add":"trap","del":"trap"}]),
    );
    let out = Invocation::new("ADD")
        .env("WASM_CNI_LOG", "info")
        .run(&conf);
    assert_eq!(out.error_code(), 999);
    assert_eq!(
        plugin_logs(&out.stderr),
        [
            ("fx".to_string(), "a add".to_string()),
            ("fx-net".to_string(), "fx-net add".to_string()),
            ("fx".to_string(), "a del".to_string()),
            ("fx-net".to_string(), "fx-net del".to_string()),
        ]
    );
    // Without a failure the delegate's result flows into the plugin's.
    let ok = sb.conf(
        "1.1.0",
        "ipamok",
        json!([{"type":"fx","tag":"b","callIpam":true,"ipam":{"type":"fx-net"}}]),
    );
    let out = Invocation::new("ADD").env("WASM_CNI_LOG", "info").run(&ok);
    out.assert_ok();
    assert_eq!(calls(&out.stderr), ["b add", "fx-net add"]);
    let del = Invocation::new("DEL").env("WASM_CNI_LOG", "info").run(&ok);
    del.assert_ok();
    assert_eq!(calls(&del.stderr), ["b del", "fx-net del"]);
}
