//! `AuditRecord::decode`, the reader of `__audit` record values: the whole
//! input is a record value. Whatever decodes must encode and decode to
//! itself.

#![no_main]

use corelog_wire::message::audit::AuditRecord;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(record) = AuditRecord::decode(data) {
        let _ = format!("{record:?}");
        let again = AuditRecord::decode(&record.encode()).expect("re-encoded record decodes");
        assert_eq!(record, again);
    }
});
