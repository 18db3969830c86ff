//! Deterministic host-side link names.
//!
//! A guest has no randomness, so where the reference plugins pick
//! `veth` + 8 random hex digits, the SDK hashes (network name, container id,
//! ifname, salt) with 32-bit FNV-1a. On a name collision the caller retries
//! with the next salt, up to [`MAX_NAME_ATTEMPTS`] times.

/// How many salts a caller tries before giving up (the reference retries 10
/// random names).
pub const MAX_NAME_ATTEMPTS: u32 = 10;

const FNV_OFFSET: u32 = 0x811c_9dc5;
const FNV_PRIME: u32 = 0x0100_0193;

/// 32-bit FNV-1a.
pub fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(FNV_OFFSET, |hash, byte| {
        (hash ^ u32::from(*byte)).wrapping_mul(FNV_PRIME)
    })
}

/// `veth` + 8 lowercase hex digits, a function of the attachment and `salt`.
/// 12 characters: within IFNAMSIZ.
pub fn veth_name(network: &str, container_id: &str, ifname: &str, salt: u32) -> String {
    let mut input = Vec::with_capacity(network.len() + container_id.len() + ifname.len() + 16);
    for part in [
        network.as_bytes(),
        container_id.as_bytes(),
        ifname.as_bytes(),
    ] {
        input.extend_from_slice(part);
        // A separator that cannot occur in any of the three, so ("ab","c")
        // and ("a","bc") hash differently.
        input.push(0);
    }
    input.extend_from_slice(&salt.to_le_bytes());
    format!("veth{:08x}", fnv1a32(&input))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_known_vectors() {
        assert_eq!(fnv1a32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a32(b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn veth_names_are_stable_distinct_and_short() {
        let a = veth_name("mynet", "ctr1", "eth0", 0);
        assert_eq!(a, veth_name("mynet", "ctr1", "eth0", 0));
        assert!(a.starts_with("veth") && a.len() == 12, "{a}");
        assert!(a[4..]
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_ne!(a, veth_name("mynet", "ctr1", "eth0", 1));
        assert_ne!(a, veth_name("mynet", "ctr1", "eth1", 0));
        assert_ne!(a, veth_name("mynet", "ctr2", "eth0", 0));
        assert_ne!(veth_name("ab", "c", "x", 0), veth_name("a", "bc", "x", 0));
    }
}
