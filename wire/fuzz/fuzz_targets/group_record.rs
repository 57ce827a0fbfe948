//! `GroupRecord::decode`, the reader of `__groups` record values that a
//! coordinator replays on start: the whole input is a record value. Whatever
//! decodes must have a key, and encode and decode to itself.

#![no_main]

use corelog_wire::message::group_records::GroupRecord;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(record) = GroupRecord::decode(data) {
        let _ = format!("{record:?}");
        let key = record.key();
        let again = GroupRecord::decode(&record.encode()).expect("re-encoded record decodes");
        assert_eq!(key, again.key());
        assert_eq!(record, again);
    }
});
