;; A wasm-cni plugin in WAT that goes for ambient authority. Its ADD carries
;; out attack number $attack and reports the outcome as a CNI error:
;;   0  sockets: create a TCP and a UDP socket (expected: access-denied) and
;;      look up a name (expected: an error; wasmtime answers a disabled
;;      lookup with permanent-resolver-failure): error 5 "sockets: tcp and
;;      udp access-denied, name lookup refused".
;;   1  filesystem: list the preopened directories (expected: none), then,
;;      having no descriptor to open /etc/passwd under, forge one: the
;;      canonical ABI traps on the unknown handle index.
;;   2  namespaces: forge a `netns` handle and list its links: the same trap.
;;   3  residue: look for what an earlier call of this component left in
;;      memory (a marker in the first page, and in every 4 KiB of 40 pages
;;      it grew: past the 256 KiB a daemon's pool slot keeps resident, so
;;      both of a slot's resets are seen), then leave the same marker for
;;      the next call: error 5 "memory was fresh: no residue of an earlier
;;      call".
;; Anything that gets through ends in error 999 "LEAKED: ...". Every other
;; verb succeeds.
(module
  (import "wasi:sockets/instance-network@0.2.12" "instance-network"
    (func $instance_network (result i32)))
  ;; (network, name ptr, name len, return area)
  (import "wasi:sockets/ip-name-lookup@0.2.12" "resolve-addresses"
    (func $resolve_addresses (param i32 i32 i32 i32)))
  ;; (address family, return area)
  (import "wasi:sockets/tcp-create-socket@0.2.12" "create-tcp-socket"
    (func $create_tcp (param i32 i32)))
  (import "wasi:sockets/udp-create-socket@0.2.12" "create-udp-socket"
    (func $create_udp (param i32 i32)))
  ;; (return area: list pointer, length)
  (import "wasi:filesystem/preopens@0.2.12" "get-directories"
    (func $get_directories (param i32)))
  ;; (descriptor, path-flags, path ptr, path len, open-flags, descriptor-flags, return area)
  (import "wasi:filesystem/types@0.2.12" "[method]descriptor.open-at"
    (func $open_at (param i32 i32 i32 i32 i32 i32 i32)))
  ;; (netns, return area)
  (import "cni:plugin/network@0.2.2" "[method]netns.list-links"
    (func $list_links (param i32 i32)))

  (memory (export "memory") 2)
  ;; EXTRA-MEMORIES
  (global $attack i32 (i32.const 0)) ;; ATTACK
  (global $heap (mut i32) (i32.const 65536))

  ;; 16: return area of imports. 256: the error an export returns. 512: ok.
  (data (i32.const 1024) "sockets: tcp and udp access-denied, name lookup refused")
  (data (i32.const 1100) "LEAKED: a socket or a name lookup was allowed")
  (data (i32.const 1200) "LEAKED: preopened directories")
  (data (i32.const 1300) "etc/passwd")
  (data (i32.const 1400) "LEAKED: a forged handle was accepted")
  (data (i32.const 1500) "unknown attack")
  (data (i32.const 1600) "an error other than access-denied")
  (data (i32.const 1700) "localhost")
  (data (i32.const 1800) "LEAKED: memory of an earlier call")
  (data (i32.const 1900) "memory was fresh: no residue of an earlier call")

  ;; A bump allocator: the host allocates the request and import results here.
  (func (export "cabi_realloc") (param $old i32) (param $old_size i32)
      (param $align i32) (param $size i32) (result i32)
    (local $p i32) (local $end i32) (local $have i32)
    (local.set $p
      (i32.and
        (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
        (i32.sub (i32.const 0) (local.get $align))))
    (local.set $end (i32.add (local.get $p) (local.get $size)))
    (local.set $have (i32.mul (memory.size) (i32.const 65536)))
    (if (i32.gt_u (local.get $end) (local.get $have))
      (then
        (if (i32.eq
              (memory.grow
                (i32.add
                  (i32.shr_u (i32.sub (local.get $end) (local.get $have)) (i32.const 16))
                  (i32.const 1)))
              (i32.const -1))
          (then unreachable))))
    (global.set $heap (local.get $end))
    (if (local.get $old)
      (then (memory.copy (local.get $p) (local.get $old) (local.get $old_size))))
    (local.get $p))

  ;; result::err(error { code, msg, details: "" })
  (func $fail (param $code i32) (param $msg i32) (param $len i32) (result i32)
    (i32.store8 (i32.const 256) (i32.const 1))
    (i32.store (i32.const 260) (local.get $code))
    (i32.store (i32.const 264) (local.get $msg))
    (i32.store (i32.const 268) (local.get $len))
    (i32.store (i32.const 272) (i32.const 0))
    (i32.store (i32.const 276) (i32.const 0))
    (i32.const 256))

  (func $ok (result i32)
    (i32.store8 (i32.const 512) (i32.const 0))
    (i32.const 512))

  ;; 0 if the result<_, error-code> at 16 is err(access-denied), else the
  ;; message of what happened instead.
  (func $denied (result i32)
    (if (i32.eqz (i32.load8_u (i32.const 16)))
      (then (return (i32.const 1100))))
    (if (i32.ne (i32.load8_u (i32.const 20)) (i32.const 1))
      (then (return (i32.const 1600))))
    (i32.const 0))

  (func $fail_why (param $why i32) (result i32)
    (call $fail (i32.const 999) (local.get $why)
      (select (i32.const 45) (i32.const 33) (i32.eq (local.get $why) (i32.const 1100)))))

  (func $sockets (result i32)
    (local $why i32)
    ;; ip-address-family::ipv4
    (call $create_tcp (i32.const 0) (i32.const 16))
    (local.set $why (call $denied))
    (if (local.get $why) (then (return (call $fail_why (local.get $why)))))
    (call $create_udp (i32.const 0) (i32.const 16))
    (local.set $why (call $denied))
    (if (local.get $why) (then (return (call $fail_why (local.get $why)))))
    (call $resolve_addresses (call $instance_network) (i32.const 1700) (i32.const 9) (i32.const 16))
    (if (i32.eqz (i32.load8_u (i32.const 16)))
      (then (return (call $fail_why (i32.const 1100)))))
    (call $fail (i32.const 5) (i32.const 1024) (i32.const 55)))

  (func $filesystem (result i32)
    (call $get_directories (i32.const 16))
    (if (i32.load (i32.const 20))
      (then (return (call $fail (i32.const 999) (i32.const 1200) (i32.const 29)))))
    ;; path-flags 0, "etc/passwd", open-flags 0, descriptor-flags read
    (call $open_at (i32.const 7) (i32.const 0) (i32.const 1300) (i32.const 10)
      (i32.const 0) (i32.const 1) (i32.const 16))
    (call $fail (i32.const 999) (i32.const 1400) (i32.const 36)))

  (func $netns (result i32)
    (call $list_links (i32.const 5) (i32.const 16))
    (call $fail (i32.const 999) (i32.const 1400) (i32.const 36)))

  ;; The marker an earlier call leaves at 3000 and in the pages it grew.
  (func $residue (result i32)
    (local $base i32) (local $p i32) (local $end i32)
    (if (i32.eq (i32.load (i32.const 3000)) (i32.const 0x5ec2e7))
      (then (return (call $fail (i32.const 999) (i32.const 1800) (i32.const 33)))))
    ;; Every page above the two declared ones: grown by an earlier call,
    ;; if the slot kept them.
    (local.set $base (memory.grow (i32.const 40)))
    (if (i32.lt_s (local.get $base) (i32.const 0)) (then unreachable))
    (local.set $end (i32.mul (memory.size) (i32.const 65536)))
    (local.set $p (i32.const 131072))
    (loop $scan
      (if (i32.eq (i32.load (local.get $p)) (i32.const 0x5ec2e7))
        (then (return (call $fail (i32.const 999) (i32.const 1800) (i32.const 33)))))
      (local.set $p (i32.add (local.get $p) (i32.const 4096)))
      (br_if $scan (i32.lt_u (local.get $p) (local.get $end))))
    (i32.store (i32.const 3000) (i32.const 0x5ec2e7))
    (local.set $p (i32.const 131072))
    (loop $mark
      (i32.store (local.get $p) (i32.const 0x5ec2e7))
      (local.set $p (i32.add (local.get $p) (i32.const 4096)))
      (br_if $mark (i32.lt_u (local.get $p) (local.get $end))))
    (call $fail (i32.const 5) (i32.const 1900) (i32.const 47)))

  (func (export "cni:plugin/plugin@0.2.2#add") (param i32) (result i32)
    (if (i32.eq (global.get $attack) (i32.const 3)) (then (return (call $residue))))
    (if (i32.eq (global.get $attack) (i32.const 0)) (then (return (call $sockets))))
    (if (i32.eq (global.get $attack) (i32.const 1)) (then (return (call $filesystem))))
    (if (i32.eq (global.get $attack) (i32.const 2)) (then (return (call $netns))))
    (call $fail (i32.const 7) (i32.const 1500) (i32.const 14)))

  (func (export "cni:plugin/plugin@0.2.2#del") (param i32) (result i32) (call $ok))
  (func (export "cni:plugin/plugin@0.2.2#check") (param i32) (result i32) (call $ok))
  (func (export "cni:plugin/plugin@0.2.2#status") (param i32 i32) (result i32) (call $ok))
  (func (export "cni:plugin/plugin@0.2.2#gc") (param i32 i32 i32 i32) (result i32) (call $ok))
)
