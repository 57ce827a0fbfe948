//! PartitionReportRequestV1 and PartitionReportResponseV1 decoders; see `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::partition_report::{PartitionReportRequestV1, PartitionReportResponseV1};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<PartitionReportRequestV1, PartitionReportResponseV1>(data, |_, _| {}, |_, _| {});
});
