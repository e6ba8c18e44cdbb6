//! The digest Strait records on every object it writes
//! (`strait.dev/applied-digest`): FNV-1a over the object's JSON text
//! without the annotation. serde_json writes map keys in order, so equal
//! objects give equal digests. The import writer compares it with what it
//! wants; an object read back is held as its digest alone when its fields
//! still make that digest (`discovery::condensed`). Pure.

use serde_json::Value;

/// The annotation holding the digest of the rest of the object.
pub const APPLIED_DIGEST_ANNOTATION: &str = "strait.dev/applied-digest";

/// The digest of `object`, as the annotation spells it.
pub fn applied_digest(object: &Value) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in object.to_string().bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}
