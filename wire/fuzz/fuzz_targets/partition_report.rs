//! PartitionReportRequest and PartitionReportResponse decoders; see `common.rs` for the
//! input format.

#![no_main]

mod common;

use corelog_wire::message::partition_report::{PartitionReportRequest, PartitionReportResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<PartitionReportRequest, PartitionReportResponse>(data, |_, _| {}, |_, _| {});
});
